#!/usr/bin/env bash
# Set up what benchmarks/ needs: the bench extra (TRL, datasets, psutil) in rllm's .venv, and the
# LiteLLM proxy in its own venv (.venv-bench-litellm) for bench_gateway.py.
#
#   scripts/setup_bench.sh
#
# TRL goes into .venv through scripts/setup.sh, so torch stays pinned to the installed build (its
# constraints file) and transformers stays inside rllm's own range (<5.20): installing trl can never
# replace torch or move transformers past what rllm supports; the script checks both afterwards.
# LiteLLM pins its own versions of packages rllm shares (pydantic, openai, uvicorn, ...), so it lives in
# a venv of its own; httptools makes its uvicorn parse HTTP like the gateway's does. The version is
# pinned: the one benchmarks/README.md's numbers were measured with.
#
# Environment:
#   RLLM_VENV            rllm's venv (default: .venv), passed on to scripts/setup.sh
#   RLLM_LITELLM_VENV    LiteLLM's venv (default: .venv-bench-litellm; bench_gateway.py looks there)
#
# Safe to re-run: both halves check whether they are already done, so a re-run takes seconds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${RLLM_VENV:-.venv}"
LITELLM_VENV="${RLLM_LITELLM_VENV:-.venv-bench-litellm}"
LITELLM_SPEC="litellm[proxy]==1.108.7"
TRANSFORMERS_SPEC="transformers<5.20"

log() { printf '[setup-bench] %s\n' "$*"; }
die() { printf '[setup-bench] error: %s\n' "$*" >&2; exit 1; }

# --- rllm + the bench extra ------------------------------------------------------------------------
torch_before="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
bash scripts/setup.sh bench
PY="$VENV/bin/python"
torch_after="$("$PY" -c 'import torch; print(torch.__version__)')"
if [[ -n "$torch_before" && "$torch_before" != "$torch_after" ]]; then
  die "torch changed from $torch_before to $torch_after while installing the bench extra; this is a bug"
fi
"$PY" - "$TRANSFORMERS_SPEC" <<'EOF' || die "the bench extra left transformers outside rllm's range (see above)"
import sys, importlib.metadata as m
from packaging.specifiers import SpecifierSet
spec = SpecifierSet(sys.argv[1].removeprefix("transformers"))
have = m.version("transformers")
if have not in spec:
    sys.exit(f"transformers {have} is outside {sys.argv[1]}")
EOF
log "bench extra: trl $("$PY" -c 'import trl; print(trl.__version__)'), \
transformers $("$PY" -c 'import transformers; print(transformers.__version__)'), torch $torch_after"

# --- LiteLLM in its own venv -----------------------------------------------------------------------
if [[ -x "$LITELLM_VENV/bin/python" ]]; then
  log "reusing venv $LITELLM_VENV"
else
  python3 -m venv "$LITELLM_VENV" \
    || die "could not create venv $LITELLM_VENV (on Debian/Ubuntu: apt-get install python3-venv)"
  log "created venv $LITELLM_VENV"
fi
stamp="$LITELLM_VENV/rllm-bench-setup.stamp"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$LITELLM_SPEC httptools" && -x "$LITELLM_VENV/bin/litellm" ]]; then
  log "$LITELLM_SPEC already installed in $LITELLM_VENV"
else
  log "installing $LITELLM_SPEC and httptools into $LITELLM_VENV"
  "$LITELLM_VENV/bin/python" -m pip --disable-pip-version-check install "$LITELLM_SPEC" httptools
  [[ -x "$LITELLM_VENV/bin/litellm" ]] || die "$LITELLM_VENV/bin/litellm is missing after the install"
  echo "$LITELLM_SPEC httptools" >"$stamp"
fi
log "done: $VENV with the bench extra, $LITELLM_VENV with $LITELLM_SPEC"
