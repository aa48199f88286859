# Sourced by the set-up scripts (setup.sh, setup_vllm.sh): which torch build a venv gets, from which index.
#
#   source scripts/_torch.sh
#   install_torch PYTHON CPU_SPEC [GPU_SPEC]     e.g. install_torch .venv/bin/python torch==2.13.0 torch
#
# The choice, in order:
#   1. RLLM_TORCH_INDEX_URL set: torch comes from that index, whatever the machine (set but empty: pip's
#      configured index). Not probed: if it cannot be reached, pip fails and says so.
#   2. GPU_SPEC given and a GPU found (nvidia-smi works): GPU_SPEC from pip's configured index (PyPI's
#      Linux torch is the CUDA build).
#   3. Otherwise the CPU build: CPU_SPEC from PyTorch's CPU wheel index (RLLM_TORCH_CPU_INDEX_URL), which is
#      probed first; when it cannot be reached (an offline mirror, a firewall), CPU_SPEC from pip's
#      configured index instead, saying so: on a stock PyPI index that is the multi-GB CUDA build, so the
#      message names the override that avoids it.
#
# The caller defines log and die (each script prints with its own prefix). Set-up never reaches this when
# torch already imports in the venv: an installed torch is kept.

TORCH_CPU_INDEX_URL="${RLLM_TORCH_CPU_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
TORCH_PROBE_TIMEOUT_S="${RLLM_TORCH_PROBE_TIMEOUT_S:-10}"
_PIP_INDEX="pip's configured index"  # a name for messages (a quote inside "${x:-...}" trips bash's parser)

# Prints nothing and succeeds when INDEX serves a torch page; else prints why not and fails.
_torch_index_reachable() {
  local py=$1 index=$2
  "$py" - "$index/torch/" "$TORCH_PROBE_TIMEOUT_S" <<'EOF'
import os, ssl, sys, urllib.request

url, timeout_s = sys.argv[1], float(sys.argv[2])
# pip's own CA bundle where one is configured through the environment (a proxy's CA, say).
context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
try:
    with urllib.request.urlopen(url, timeout=timeout_s, context=context) as reply:
        reply.read(1)
except Exception as exc:  # any failure means: do not send pip there
    sys.exit(f"{type(exc).__name__}: {exc}")
EOF
}

_gpu_found() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1
}

install_torch() {
  local py=$1 cpu_spec=$2 gpu_spec=${3:-}
  local spec index reason
  if [[ -n "$gpu_spec" ]] && _gpu_found; then
    spec=$gpu_spec
    index=${RLLM_TORCH_INDEX_URL-}
    log "GPU found (nvidia-smi works): installing $spec with CUDA from ${index:-$_PIP_INDEX}"
  else
    spec=$cpu_spec
    if [[ -n "${RLLM_TORCH_INDEX_URL+set}" ]]; then
      index=$RLLM_TORCH_INDEX_URL
      log "no GPU found: installing CPU $spec from ${index:-$_PIP_INDEX} (RLLM_TORCH_INDEX_URL)"
    elif reason="$(_torch_index_reachable "$py" "$TORCH_CPU_INDEX_URL" 2>&1)"; then
      index=$TORCH_CPU_INDEX_URL
      log "no GPU found: installing CPU $spec from PyTorch's CPU index $index"
    else
      index=""
      reason=${reason##*$'\n'}  # the probe's last line: the exception
      log "no GPU found, but PyTorch's CPU index $TORCH_CPU_INDEX_URL cannot be reached ($reason):" \
          "installing $spec from pip's configured index instead. On a stock PyPI index that is the CUDA" \
          "build (2.7 GB of wheels where the CPU build is 0.2 GB); set RLLM_TORCH_INDEX_URL to a" \
          "reachable CPU index or mirror to avoid it"
    fi
  fi
  "$py" -m pip --disable-pip-version-check install ${index:+--index-url "$index"} "$spec" \
    || die "pip could not install $spec from ${index:-$_PIP_INDEX} (see pip's message above);" \
           "set RLLM_TORCH_INDEX_URL to an index that has it and re-run"
  if [[ "$spec" == "$cpu_spec" ]] && "$py" -c 'import sys, torch; sys.exit(torch.version.cuda is None)' 2>/dev/null
  then
    log "warning: the installed torch is a CUDA build on a machine without a GPU; it runs on the CPU," \
        "but it is several GB larger than the CPU build (RLLM_TORCH_INDEX_URL=$TORCH_CPU_INDEX_URL avoids it)"
  fi
}
