"""``rllm profile RUN``: where a run's steps spend their time and memory, and what to change.

    rllm profile runs/default          the mean step's phases, rates, memory peaks and advice
    rllm profile default               the same (a run name under runs/)

Reads the run directory's metrics.jsonl and config.yaml only, so it works beside a running training.
docs/profiling.md says what each metric means.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_profile_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "profile",
        help="a run's bottlenecks: phase times, idle time, memory peaks, and what to change",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", metavar="RUN", help="a run directory (trainer.run_dir/trainer.name) or a run name")
    p.set_defaults(func=run_profile)
    return p


def run_profile(args: argparse.Namespace) -> int:
    # Imported here, as every handler's imports are: `rllm --help` should not load what a command needs.
    from rllm.trainer.profile_report import NoMetricsError, find_run, load_profile, render

    try:
        print(render(load_profile(find_run(args.run))))
    except NoMetricsError as exc:
        print(f"rllm profile: {exc}")
        return 2
    return 0
