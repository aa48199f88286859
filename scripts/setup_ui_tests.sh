#!/usr/bin/env bash
# Install what the browser tests (tests/ui/test_browser.py) need: a Chromium and the playwright package.
#
#   scripts/setup_ui_tests.sh [VENV]     VENV: the venv of scripts/setup.sh (default: $RLLM_VENV or .venv)
#
# Chromium comes from the system's package manager (Debian: `apt-get install chromium`), not from
# Playwright's own browser download, which needs Microsoft's CDN. The tests use the first of chromium,
# chromium-browser, google-chrome on PATH, or the executable named by $RLLM_CHROMIUM.
#
# Safe to re-run: each step is skipped when it is already done, so a re-run takes a second or two.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${1:-${RLLM_VENV:-.venv}}"

log() { printf '[setup-ui-tests] %s\n' "$*"; }
die() { printf '[setup-ui-tests] error: %s\n' "$*" >&2; exit 1; }

[[ -x "$VENV/bin/python" ]] || die "no venv at $VENV: run scripts/setup.sh first (or pass the venv's path)"

# --- Chromium ----------------------------------------------------------------------------------------
find_chromium() {
  if [[ -n "${RLLM_CHROMIUM:-}" ]]; then
    if [[ -x "$RLLM_CHROMIUM" ]]; then echo "$RLLM_CHROMIUM"; fi
    return 0
  fi
  command -v chromium || command -v chromium-browser || command -v google-chrome || command -v google-chrome-stable || true
}

chromium="$(find_chromium)"
if [[ -n "$chromium" ]]; then
  log "Chromium: $chromium"
else
  [[ -z "${RLLM_CHROMIUM:-}" ]] || die "RLLM_CHROMIUM=$RLLM_CHROMIUM is not an executable file"
  command -v apt-get >/dev/null \
    || die "no Chromium found and no apt-get to install one: install Chromium, or set RLLM_CHROMIUM to its executable"
  if [[ "$(id -u)" -eq 0 ]]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    die "installing Chromium needs root: run 'apt-get install -y chromium' as root, then re-run this script"
  fi
  log "installing Chromium with apt-get"
  # The package lists may be missing (fresh containers) or stale: update them once if the install fails.
  if ! ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; then
    ${as_root[@]+"${as_root[@]}"} apt-get update -q
    ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  fi
  chromium="$(find_chromium)"
  [[ -n "$chromium" ]] || die "apt-get installed chromium but no chromium executable is on PATH"
  log "Chromium: $chromium"
fi
"$chromium" --version 2>/dev/null | sed 's/^/[setup-ui-tests]   /' || true

# --- playwright (the Python package only; its browser download is not used) --------------------------
PY="$VENV/bin/python"
if "$PY" -c 'import playwright.sync_api' 2>/dev/null; then
  log "playwright: already in $VENV"
else
  # scripts/setup.sh's torch pin, so that nothing installed here can replace torch.
  constraints=()
  [[ -f "$VENV/rllm-torch-constraints.txt" ]] && constraints=(-c "$VENV/rllm-torch-constraints.txt")
  log "installing playwright into $VENV"
  "$PY" -m pip --disable-pip-version-check install -q ${constraints[@]+"${constraints[@]}"} "playwright>=1.45"
fi
log "ready: $PY -m pytest tests/ui/test_browser.py"
