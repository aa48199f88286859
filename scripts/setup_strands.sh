#!/usr/bin/env bash
# Set up .venv-strands: rllm (editable) with the test and strands extras, for examples/strands_agent.
#
#   scripts/setup_strands.sh
#
# Strands Agents' OpenAI provider (strands-agents[openai]) pins openai<3, while the openai-agents extra in
# .venv needs openai>=3: the two cannot share a venv, so Strands gets its own. rllm itself needs only
# openai>=1.40, so it runs on either. The venv is made by scripts/setup.sh (RLLM_VENV=.venv-strands): the
# same torch choice (an existing torch kept, pip's CUDA build where nvidia-smi works, the CPU build of
# RLLM_TORCH_VERSION from PyTorch's CPU index elsewhere: scripts/_torch.sh), pinned by its constraints file while rllm[test,strands] installs, so a
# CUDA build is never pulled on a CPU machine. The built-in model's files live in ~/.cache/rllm, shared
# by every venv.
#
# Environment:
#   RLLM_STRANDS_VENV     venv to create or reuse (default: .venv-strands in the repository)
#   RLLM_TORCH_VERSION, RLLM_TORCH_INDEX_URL, RLLM_TORCH_CPU_INDEX_URL: as for scripts/setup.sh
#
# Safe to re-run: scripts/setup.sh skips every step that is already done, so a re-run takes seconds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${RLLM_STRANDS_VENV:-.venv-strands}"

log() { printf '[setup-strands] %s\n' "$*"; }
die() { printf '[setup-strands] error: %s\n' "$*" >&2; exit 1; }

RLLM_VENV="$VENV" bash scripts/setup.sh strands
"$VENV/bin/python" -c 'import strands, strands.models.openai, openai, rllm' \
  || die "strands (or its OpenAI provider) does not import in $VENV: run $VENV/bin/python -c 'import strands.models.openai'"
log "done: $VENV with strands-agents $("$VENV/bin/python" -c \
  'import importlib.metadata as m; print(m.version("strands-agents"))'), openai $("$VENV/bin/python" -c \
  'import openai; print(openai.__version__)')"
