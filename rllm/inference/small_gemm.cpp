// y = x W^T for a few rows of x, in float32: the local engine's decode-step products on CPU.
//
// x [M, K] and y [M, N] row-major, W [N, K] row-major (an nn.Linear weight, used in place: no packed copy),
// 1 <= M <= 8. Built once per machine by rllm/inference/small_gemm.py (g++ -O3 -march=native -fopenmp) and
// called through ctypes; see that module for why it exists and what it is measured to buy.
//
// Each OpenMP thread takes a run of R consecutive weight rows (output features) at a time and walks them
// once, left to right, one vector of VL floats per row per step: every weight element is read from memory
// exactly once and multiplied into all M rows of x while it is in a register (M * R accumulators). The
// weights stream from memory sequentially (the R rows of a block are adjacent), with two software
// prefetches per row and step: into L2 PREFETCH_L2 floats ahead, into L1 PREFETCH_L1 ahead. Tuned on the
// reference machine (Intel Xeon with AMX, 2 cores), SmolLM2-135M's 211 decode-step products at 8 rows:
// no prefetch 38-42 ms, one L1 prefetch 1536 floats ahead 27-29 ms, these two and R = 3 25.0-25.2 ms
// (torch's GEMM 47-49 ms; one row, which only reads the weights, 20-21 ms).

#include <cstdint>

#include <omp.h>

namespace {

#if defined(__AVX512F__)
constexpr int VBYTES = 64;
#else
constexpr int VBYTES = 32;
#endif
constexpr int VL = VBYTES / 4;
// Weight rows per block: M * R accumulators must fit the registers (8 x 3 of AVX-512's 32; AVX2 has 16).
constexpr int R = VBYTES == 64 ? 3 : 1;
constexpr int PREFETCH_L2 = 4608;  // floats ahead of the current column, per weight row
constexpr int PREFETCH_L1 = 768;
typedef float vf __attribute__((vector_size(VBYTES), aligned(4)));

template <int M, int RB>
inline void block(const float* __restrict x, const float* __restrict w, float* __restrict y, int64_t K,
                  int64_t N, int64_t n0) {
  vf acc[M][RB];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) acc[m][r] = vf{};
  const int64_t kv = K - K % VL;
  for (int64_t k = 0; k < kv; k += VL) {
    vf wv[RB];
    for (int r = 0; r < RB; ++r) {
      __builtin_prefetch(w + r * K + k + PREFETCH_L2, 0, 2);
      __builtin_prefetch(w + r * K + k + PREFETCH_L1, 0, 3);
      wv[r] = *reinterpret_cast<const vf*>(w + r * K + k);
    }
    for (int m = 0; m < M; ++m) {
      const vf xv = *reinterpret_cast<const vf*>(x + m * K + k);
      for (int r = 0; r < RB; ++r) acc[m][r] += xv * wv[r];
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < RB; ++r) {
      float s = 0.f;
      for (int i = 0; i < VL; ++i) s += acc[m][r][i];
      for (int64_t k = kv; k < K; ++k) s += x[m * K + k] * w[r * K + k];
      y[m * N + n0 + r] = s;
    }
}

template <int M>
void run(const float* x, const float* W, float* y, int64_t K, int64_t N, int threads) {
  const int64_t blocks = N / R;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < blocks; ++b) block<M, R>(x, W + b * R * K, y, K, N, b * R);
  for (int64_t n = blocks * R; n < N; ++n) block<M, 1>(x, W + n * K, y, K, N, n);
}

}  // namespace

extern "C" {

int rllm_small_gemm_max_rows() { return 8; }

int rllm_small_gemm_vector_bytes() { return VBYTES; }

// Returns 0, or -1 when M is outside 1..8 (nothing written).
int rllm_small_gemm(const float* x, const float* W, float* y, int M, int64_t K, int64_t N, int threads) {
  switch (M) {
    case 1: run<1>(x, W, y, K, N, threads); return 0;
    case 2: run<2>(x, W, y, K, N, threads); return 0;
    case 3: run<3>(x, W, y, K, N, threads); return 0;
    case 4: run<4>(x, W, y, K, N, threads); return 0;
    case 5: run<5>(x, W, y, K, N, threads); return 0;
    case 6: run<6>(x, W, y, K, N, threads); return 0;
    case 7: run<7>(x, W, y, K, N, threads); return 0;
    case 8: run<8>(x, W, y, K, N, threads); return 0;
  }
  return -1;
}

}  // extern "C"
