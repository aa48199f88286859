#!/usr/bin/env bash
# tinker-cookbook 0.6.1 in the rllm venv, for running its recipes against `rllm serve tinker`
# (tests/serve/test_tinker_cookbook.py, docs/tinker.md).
#
#   bash scripts/setup.sh tinker-cookbook && bash scripts/setup_cookbook.sh
#
# tinker-cookbook 0.6.1 declares tml-renderers>=0.4.1, which the package index does not have (its newest
# there is 0.2.1), so pip cannot resolve it. The cookbook imports tml_renderers only for Thinking Machines'
# own models (tokenizer_utils, the audio recipes), never for a Hugging Face model, so it is installed here
# without its dependency list; the `tinker-cookbook` extra of rllm brings the rest of that list (torch
# stays pinned by setup.sh's constraints file).
#
# Environment: RLLM_VENV, the venv to install into (default: .venv, as scripts/setup.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${RLLM_VENV:-.venv}"
PY="$VENV/bin/python"
COOKBOOK_VERSION="0.6.1"

die() { printf '[setup_cookbook] error: %s\n' "$*" >&2; exit 1; }

[[ -x "$PY" ]] || die "no venv at $VENV: run bash scripts/setup.sh tinker-cookbook first"
"$PY" -c 'import chz, blobfile, tiktoken, tinker' 2>/dev/null \
  || die "the tinker-cookbook extra is missing in $VENV: run bash scripts/setup.sh tinker-cookbook first"
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('tinker-cookbook') != '$COOKBOOK_VERSION')" 2>/dev/null; then
  printf '[setup_cookbook] tinker-cookbook %s already installed\n' "$COOKBOOK_VERSION"
else
  "$PY" -m pip --disable-pip-version-check install --no-deps "tinker-cookbook==$COOKBOOK_VERSION"
fi
"$PY" -c 'import tinker_cookbook.recipes.math_rl.train' \
  || die "tinker_cookbook does not import in $VENV: run $PY -c 'import tinker_cookbook.recipes.math_rl.train' to see why"
printf '[setup_cookbook] tinker-cookbook %s ready in %s\n' "$COOKBOOK_VERSION" "$VENV"
