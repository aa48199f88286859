"""The fault-injection suite, measured: each fault injected for real into real rllm code (a raising agent, real
HTTP servers answering 500 or hanging, crashing tools, a killed vLLM server, a trace store that cannot write,
a SIGKILLed trainer), counted from the durable records (benchmarks/_faults.py says how), then a short
training run of the default task under faults 1-4 at once.

One line per fault (injected, retried, failed with its reasons, lost, duplicated), then exactly one machine-
readable last line ``total: injected=N retried=N failed=N lost=0 duplicated=0``. Exit status 1 when anything
was lost or duplicated, or (full mode) the run under faults did not learn.

    .venv/bin/python benchmarks/bench_faults.py            # built-in model (smollm2-135m) for the training run
    .venv/bin/python benchmarks/bench_faults.py --quick    # plumbing: tiny model, 3 steps; vLLM skipped
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from _common import header_line, machine_line
from _faults import (
    FaultRow,
    agent_raises,
    all_faults_training,
    quick_work_dir,
    store_write_fails,
    tiny_overrides,
    tools_crash,
    total_line,
    trainer_killed,
    upstream_5xx,
    upstream_hangs,
    vllm_killed,
)

from rllm.inference.vllm_server import default_vllm_python
from rllm.models import make_tiny_llama, resolve_model


def vllm_killed_row(work: Path, quick: bool) -> FaultRow:
    """Fault 5 needs two real vLLM servers (minutes to start on 2 cores): skipped, saying why, in --quick
    and where there is no vLLM venv; the vllm tier runs it as tests/faults/test_vllm_killed.py."""
    python = default_vllm_python()
    why = None
    if quick:
        why = "--quick: two vLLM servers take minutes to start on 2 CPU cores"
    elif not Path(python).exists():
        why = f"no vLLM venv ({python}): bash scripts/setup_vllm.sh"
    if why is None:
        return vllm_killed(work, resolve_model("smollm2-135m"))
    row = FaultRow("vLLM server killed mid-step")
    row.skipped = f"{why}; the vllm tier runs it: pytest -m vllm tests/faults/test_vllm_killed.py"
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--quick", action="store_true", help="plumbing check: tiny model, a 3-step run under faults"
    )
    p.add_argument("--steps", type=int, default=8, help="steps of the full run under faults (default 8)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (runs, stores, logs)")
    args = p.parse_args()
    work = quick_work_dir()
    rows: list[FaultRow] = []
    ok = True
    t0 = time.perf_counter()
    try:
        tiny = make_tiny_llama(work / "tiny", seed=0)
        for run in (agent_raises, upstream_5xx, upstream_hangs, tools_crash):
            rows.append(run(work))
            print(rows[-1].line(), flush=True)
        rows.append(vllm_killed_row(work, args.quick))
        print(rows[-1].line(), flush=True)
        for row in (store_write_fails(work), trainer_killed(work, tiny)):
            rows.append(row)
            print(row.line(), flush=True)
        if args.quick:
            row, result = all_faults_training(
                work, tiny_overrides(tiny), steps=3, upstream_timeout_s=3.0, timeout_s=300
            )
        else:
            row, result = all_faults_training(
                work,
                [
                    "trainer.threads=2",
                    "trainer.plot=false",
                    "trainer.loggers=[jsonl]",
                    "eval.every_steps=0",
                    # At most 32 episodes in flight, so a call's queueing time on 2 cores stays well under the
                    # call timeout: with all 200 eval calls at once and a 20 s timeout, every call of the
                    # built-in model's run timed out (2026-12-03); with 120 s, each hung call held its step
                    # for 2 minutes (4 min a step).
                    "rollout.max_concurrency=32",
                ],
                steps=args.steps,
                upstream_timeout_s=30.0,
                timeout_s=3600,
            )
            before, after = result["initial_accuracy"], result["final_accuracy"]
            row.note = f"held-out accuracy {before:.1%} -> {after:.1%}; " + row.note
            ok = after > before
        rows.append(row)
        print(row.line(), flush=True)
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n**Fault injection: {'--quick' if args.quick else 'full'}, {time.perf_counter() - t0:.0f} s**")
    print(header_line())
    print(machine_line())
    lost = sum(r.lost + r.duplicated for r in rows if not r.skipped)
    print(total_line(rows))
    return 0 if ok and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
