"""Peak resident memory of every shipped example and ``rllm init`` template, each run at its own config for a
few steps in a child process, against the 6 GB target (issue 26).

Each example runs as a user runs it (``rllm train CONFIG``, ``python examples/NAME/train.py``, ``rllm train`` in
a fresh ``rllm init`` project), with only these overrides: ``trainer.steps`` (``--steps``, default 2),
``eval.before=false eval.after=false`` (the held-out eval samples no more rows at once than a training step
of these configs: their test sets are no larger than a step's episodes), the run directory, and
``algorithm.filters.drop_zero_variance=false`` so every step trains on every sampled row: the update's
memory is then the most the config can need, not whatever a lucky step kept. Per example it prints:

- the peak RSS of the child (``ru_maxrss`` from ``wait4``, what ``/usr/bin/time -v`` reports);
- where the run reached it: the first ``perf/rss_peak_<phase>_gb`` of ``metrics.jsonl`` (step and phase:
  rollout, train, sync) to reach the run's ``perf/rss_peak_gb`` (``rllm.trainer.profiler``);
- the longest trained row and the most rows a step trained, from the same metrics.

A watchdog samples the child's process tree and kills it above ``--kill-gb`` (default 9), so one example that
runs away does not take the machine with it; such a row reads "killed above N GB".

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_example_memory.py                 # every example, 2 steps
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_example_memory.py --only tool_agent,template:tool
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_example_memory.py --quick         # tiny model, default run, < 1 min
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from _common import ROOT, header_line, machine_line, markdown_table, resolve_bench_model

GB = 1e9
TARGET_GB = 6.0  # issue 26: every shipped example and template under 6 GB peak RSS at its own config
PHASES = ("rollout", "train", "sync")  # the order a step runs them in (rllm.trainer.profiler.MemoryMeter)
STRANDS_PYTHON = ROOT / ".venv-strands" / "bin" / "python"


@dataclass(frozen=True)
class Example:
    """One shipped way to train: ``kind`` is ``config`` (``rllm train <target>``), ``script`` (``python
    <target>``), ``default`` (``rllm train`` with no config) or ``template`` (``rllm init --template <target>``,
    then ``rllm train`` in the project). ``needs``: a module the example imports (its extra), checked first."""

    name: str
    kind: str
    target: str = ""
    needs: str | None = None
    python: Path | None = None  # another venv's interpreter (strands pins its own openai)


EXAMPLES = [
    Example("default", "default"),
    Example("coordinator", "config", "examples/coordinator/config.yaml"),
    Example("finance_agent", "config", "examples/finance_agent/config.yaml"),
    Example("frozenlake", "config", "examples/frozenlake/config.yaml"),
    Example("solver_judge", "config", "examples/solver_judge/config.yaml"),
    Example("tool_agent", "config", "examples/tool_agent/config.yaml"),
    # examples/train_builtin.py trains examples/configs/larger_lora.yaml (the defaults written out) for 20
    # steps and takes no overrides: its config, run the way the CLI runs it
    Example("train_builtin", "config", "examples/configs/larger_lora.yaml"),
    Example("openai_agent", "script", "examples/openai_agent/train.py"),
    Example("openai_agents_sdk", "script", "examples/openai_agents_sdk/train.py", needs="agents"),
    Example("langgraph_agent", "script", "examples/langgraph_agent/train.py", needs="langgraph"),
    Example("smolagents_agent", "script", "examples/smolagents_agent/train.py", needs="smolagents"),
    Example(
        "strands_agent", "script", "examples/strands_agent/train.py", needs="strands", python=STRANDS_PYTHON
    ),
    *(Example(f"template:{t}", "template", t) for t in ("math", "tool", "multi-agent", "gateway-agent")),
]


def rllm_cli(python: Path | str) -> list[str]:
    return [str(python), "-m", "rllm.cli.main"]


def command_for(ex: Example, workdir: Path, overrides: list[str]) -> tuple[list[str], Path] | str:
    """The child's command line and working directory, or why the example cannot run here."""
    python = ex.python or Path(sys.executable)
    if ex.python is not None and not ex.python.is_file():
        return f"no {ex.python} (its setup script makes it)"
    if ex.needs and ex.python is None and importlib.util.find_spec(ex.needs) is None:
        return f"{ex.needs} not installed (its extra)"
    if ex.kind == "default":
        return [*rllm_cli(python), "train", *overrides], ROOT
    if ex.kind == "config":
        return [*rllm_cli(python), "train", str(ROOT / ex.target), *overrides], ROOT
    if ex.kind == "script":
        return [str(python), str(ROOT / ex.target), *overrides], ROOT
    project = workdir / "project"
    subprocess.run(
        [*rllm_cli(python), "init", str(project), "--template", ex.target], check=True, cwd=workdir
    )
    return [*rllm_cli(python), "train", *overrides], project


class Watchdog:
    """Samples the RSS of a child's process tree every ``interval_s`` and kills its process group above
    ``limit_bytes``; ``killed`` says whether it had to."""

    def __init__(self, proc: subprocess.Popen, limit_bytes: float, interval_s: float = 0.5) -> None:
        self.proc, self.limit, self.interval_s = proc, limit_bytes, interval_s
        self.killed = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree_rss(self) -> int:
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def _run(self) -> None:
        while self.proc.poll() is None:
            if self._tree_rss() > self.limit:
                self.killed = True
                os.killpg(self.proc.pid, signal.SIGKILL)
                return
            time.sleep(self.interval_s)


def where_peaked(metrics_file: Path) -> dict[str, object]:
    """From a run's metrics.jsonl: the step and phase whose high-water mark first reached the run's peak,
    the longest trained row and the most rows one step trained."""
    steps = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    steps = [s for s in steps if "perf/rss_peak_gb" in s]
    if not steps:
        return {}
    top = max(s["perf/rss_peak_gb"] for s in steps)
    where = "before step 1"
    for s in steps:
        hit = next((ph for ph in PHASES if s.get(f"perf/rss_peak_{ph}_gb", 0.0) >= 0.99 * top), None)
        if hit:
            where = f"{hit} (step {s.get('step', '?')})"
            break
    updates = sum(1 for s in steps if s.get("time/forward_backward_s", 0.0) > 0)
    return {
        "peak_phase": where,
        "updates": updates,
        "max_row_tokens": max((int(s.get("batch/max_row_tokens", 0)) for s in steps), default=0),
        "max_rows": max((int(s.get("batch/num_sequences", 0)) for s in steps), default=0),
    }


def measure(ex: Example, args: argparse.Namespace, extra: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="rllm-example-mem-") as tmp:
        workdir = Path(tmp)
        run_name = ex.name.replace(":", "-")
        overrides = [
            f"trainer.steps={args.steps}",
            "eval.before=false",
            "eval.after=false",
            "algorithm.filters.drop_zero_variance=false",
            f"trainer.run_dir={workdir / 'runs'}",
            f"trainer.name={run_name}",
            "trainer.plot=false",
            *extra,
        ]
        cmd = command_for(ex, workdir, overrides)
        if isinstance(cmd, str):
            return {"name": ex.name, "skipped": cmd}
        argv, cwd = cmd
        print(f"\n=== {ex.name}: {' '.join(argv)}  (in {cwd})", flush=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        log = workdir / "log.txt"
        started = time.perf_counter()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            dog = Watchdog(proc, args.kill_gb * GB)
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            except BaseException:  # interrupted (Ctrl-C, SIGTERM): the child has its own session, end it too
                os.killpg(proc.pid, signal.SIGKILL)
                raise
            proc.returncode = os.waitstatus_to_exitcode(status)
        row: dict[str, object] = {
            "name": ex.name,
            "command": " ".join(argv),
            "peak_gb": usage.ru_maxrss * 1024 / GB,
            "wall_s": time.perf_counter() - started,
            "exit": proc.returncode,
            "killed": dog.killed,
        }
        if proc.returncode != 0 and not dog.killed:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            print("\n".join(tail), flush=True)
        metrics = workdir / "runs" / run_name / "metrics.jsonl"
        if metrics.is_file():
            row.update(where_peaked(metrics))
        print(json.dumps(row), flush=True)
        return row


def main() -> None:
    signal.signal(
        signal.SIGTERM, signal.default_int_handler
    )  # SIGTERM ends the running child, as Ctrl-C does
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="the default run on the tiny model, 1 step: CI plumbing"
    )
    parser.add_argument("--only", default=None, help="comma-separated example names (default: all)")
    parser.add_argument("--steps", type=int, default=2, help="trainer.steps of each run (default 2)")
    parser.add_argument(
        "--kill-gb", type=float, default=9.0, help="kill a child whose process tree passes this RSS"
    )
    parser.add_argument(
        "--set", action="append", default=[], help="an extra key=value override for every run"
    )
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args()
    names = [e.name for e in EXAMPLES]
    chosen = args.only.split(",") if args.only else (["default"] if args.quick else names)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        parser.error(f"unknown example(s) {unknown}: choose from {', '.join(names)}")
    extra = list(args.set)
    if args.quick:
        args.steps = 1
        extra += [
            f"model.path={resolve_bench_model('tiny')}",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=8",
        ]
    print(header_line())
    print(f"{machine_line()}; {args.steps} step(s) per example; extra overrides: {extra or 'none'}\n")
    by_name = {e.name: e for e in EXAMPLES}
    rows = [measure(by_name[n], args, extra) for n in chosen]  # in the order asked for
    table = []
    for r in rows:
        if "skipped" in r:
            table.append([r["name"], "skipped: " + str(r["skipped"]), "", "", "", "", ""])
            continue
        peak = float(r["peak_gb"])
        verdict = (
            f"killed above {args.kill_gb:g} GB"
            if r["killed"]
            else (f"exit {r['exit']}" if r["exit"] else ("under" if peak < TARGET_GB else "OVER"))
        )
        table.append(
            [
                str(r["name"]),
                f"{peak:.2f}",
                verdict,
                str(r.get("peak_phase", "-")),
                str(r.get("updates", "-")),
                f"{r.get('max_rows', '-')} x {r.get('max_row_tokens', '-')}",
                f"{float(r['wall_s']):.0f}",
            ]
        )
    print()
    print(
        markdown_table(
            [
                "example",
                "peak RSS GB",
                f"vs {TARGET_GB:g} GB",
                "reached in",
                "updates",
                "rows x longest row (tokens)",
                "wall s",
            ],
            table,
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    if any(r.get("exit") and not r.get("killed") for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
