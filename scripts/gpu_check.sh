#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py says what it runs and measures): one command for a lent GPU machine,
# under 8 minutes, ending with one table (and $OUT/gpu_check.json when $OUT is set).
#
#   bash scripts/gpu_check.sh --prepare    # here, on a machine with rllm set up and the network:
#                                          # .gpu_carry/ = the tokenizer + wheels the GPU machine lacks
#   bash scripts/gpu_check.sh              # on the GPU machine, with .gpu_carry/ carried beside the checkout
#   bash scripts/gpu_check.sh --dry-run    # the same code on CPU with a tiny model (CI's plumbing check)
#
# A lent GPU machine has torch, transformers, peft and accelerate but no network, no rllm set-up and no
# ~/.cache/rllm: it gets the git checkout plus what the call carries (64 MiB at most). --prepare fills
# .gpu_carry/ (git-ignored, about 15 MiB): SmolLM2's tokenizer (3.4 MB, from the built-in model's cache) and
# CPython 3.12 manylinux wheels of rllm's imports that the machine's image does not have (pydantic, omegaconf,
# starlette, ...: WHEELS below, each at the version this venv has). The model itself is built at random in
# the script, so no weights travel.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ -x .venv/bin/python ]]; then
  PY=.venv/bin/python
else
  PY=python3  # the GPU machine's python3 is the one with torch
fi
CARRY=.gpu_carry
# Distributions rllm's trainer, engine and backends import that the GPU image lacks (docs/results.md "GPU").
WHEELS="pydantic pydantic-core annotated-types typing-inspection omegaconf docstring-parser llguidance starlette uvicorn python-multipart"

if [[ "${1:-}" == "--prepare" ]]; then
  rm -rf "$CARRY"
  mkdir -p "$CARRY/tokenizer" "$CARRY/wheels"
  tok="$("$PY" -c 'from rllm.models import TINY_TOKENIZER_SOURCE, pull_model; print(pull_model(TINY_TOKENIZER_SOURCE))')"
  cp "$tok"/tokenizer.json "$tok"/tokenizer_config.json "$CARRY/tokenizer/"
  [[ -f "$tok/chat_template.jinja" ]] && cp "$tok/chat_template.jinja" "$CARRY/tokenizer/"
  pins=()
  for dist in $WHEELS; do
    pins+=("$dist==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$dist")")
  done
  platforms=(--platform manylinux2014_x86_64)
  for n in $(seq 17 39); do platforms+=(--platform "manylinux_2_${n}_x86_64"); done  # pip matches N exactly
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$CARRY/wheels" "${pins[@]}"
  echo "[gpu_check] $CARRY ready ($(du -sh "$CARRY" | cut -f1)): carry it to the GPU machine and run bash scripts/gpu_check.sh"
  exit 0
fi

# The carried wheels only where rllm's imports are missing (the GPU image), never over a set-up venv's own.
if compgen -G "$CARRY/wheels/*.whl" >/dev/null && ! "$PY" -c "import pydantic, omegaconf, starlette, llguidance" 2>/dev/null; then
  site="${TMPDIR:-/tmp}/rllm-gpu-check-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$CARRY"/wheels/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PY" scripts/gpu_check.py "$@"
