"""``rllm replay``: re-run a recorded training step's batch preparation and check it against the record.

    rllm replay runs/my-run                          every recorded step of a run directory
    rllm replay my-run --step 2                      a run by name (or id) in the run store
    rllm replay runs/my-run --step 2 --bundle s2.tar.gz     write a portable bundle of step 2
    rllm replay s2.tar.gz --checkpoint ckpts/step_000002    replay the bundle elsewhere, loss included

Each step's journaled episodes (all of them, not the UI's sample) go through shaping, grouping, filters,
advantages and token rows again with the run's saved config, without a model or server, and the result is
compared with what the run recorded: the token rows' digests field by field, the prepare metrics, the row
count. With the checkpoint the step started from (``checkpoints/step_<N>`` of the run directory, or
``--checkpoint``) the loss and gradient norm are recomputed on the local backend and compared too.
Steps are the trainer's step index: step N starts from checkpoint ``step_<N>`` and is logged as step N+1.
Exit code 0 when every replayed step is equal, 1 when one differs, 2 when replay cannot run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rllm.trainer.replay import ReplaySource, StepVerdict


def add_replay_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "replay",
        help="re-run a recorded training step's batch (and loss) and check it equals the record",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "run", help="a run directory, a run's name or id in the run store, or a replay bundle (.tar.gz)"
    )
    p.add_argument("--step", type=int, default=None, help="the step to replay (default: every recorded step)")
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="a checkpoint directory (step_<N>): recompute step N's loss and gradient norm from it",
    )
    p.add_argument(
        "--bundle",
        type=Path,
        default=None,
        help="write the steps as a portable bundle (tar.gz) here, and stop",
    )
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        help="the run store to look RUN up in (default: $RLLM_STORE, else runs/rllm.db)",
    )
    p.add_argument(
        "--model", default=None, help="the base model for the loss check, if not where the run's config says"
    )
    p.set_defaults(func=run_replay)
    return p


def run_replay(args: argparse.Namespace) -> int:
    """Handler of ``rllm replay``; returns the process exit code."""
    # Imported here: the trainer layer (config, backends) is more than `rllm --help` should load.
    from rllm.store import NotFound
    from rllm.trainer.replay import ReplayError
    from rllm.utils.config import ConfigError  # OmegaConf and PyYAML, as above

    try:
        source = _open_source(args.run, args.store)
        steps = [args.step] if args.step is not None else source.steps
        if not steps:
            raise ReplayError(f"{args.run} has no recorded step to replay")
        if args.bundle is not None:
            return _write_bundle(source, steps, args.bundle)
        return _replay(source, steps, args)
    except (ReplayError, NotFound, ConfigError) as exc:
        print(f"rllm replay: {exc}", file=sys.stderr)
        return 2


def _open_source(run: str, store: Path | None) -> ReplaySource:
    # Imported here: see run_replay.
    from rllm.store import StoreReader, default_store_path
    from rllm.trainer.replay import ReplayError, open_bundle, open_run

    path = Path(run)
    if path.is_file():
        return open_bundle(path)
    if path.is_dir():
        return open_run(path)
    if run.endswith((".tar.gz", ".tgz")):
        raise ReplayError(f"no bundle {run}")
    return open_run(StoreReader(store or default_store_path()).location(run))


def _write_bundle(source: ReplaySource, steps: list[int], out: Path) -> int:
    # Imported here: see run_replay.
    from rllm.trainer.replay import ReplayError, write_bundle

    unknown = [s for s in steps if s not in source.batches]
    if unknown:
        raise ReplayError(f"no recorded step {unknown[0]} in {source.name} (recorded: {source.steps})")
    write_bundle(source, steps, out)
    with_ckpt = [s for s in steps if source.checkpoint(s) is not None]
    print(
        f"wrote {out}: step(s) {', '.join(map(str, steps))} of {source.name}; checkpoint hash for "
        f"{'step(s) ' + ', '.join(map(str, with_ckpt)) if with_ckpt else 'no step (none in the run directory)'}"
    )
    return 0


def _replay(source: ReplaySource, steps: list[int], args: argparse.Namespace) -> int:
    # Imported here: see run_replay.
    from rllm.trainer.replay import (
        LOSS_RTOL,
        ReplayError,
        check_update,
        checkpoint_sha256,
        checkpoint_step,
        replay_step,
    )

    cfg = source.config()
    given_step = checkpoint_step(args.checkpoint) if args.checkpoint is not None else None
    if args.checkpoint is not None:
        if given_step not in steps:
            raise ReplayError(
                f"{args.checkpoint} is the checkpoint of step {given_step}, which is not among the replayed "
                f"step(s) {steps}"
            )
        expected = source.checkpoint_hashes.get(given_step)
        if expected is not None and (got := checkpoint_sha256(args.checkpoint)) != expected:
            raise ReplayError(
                f"{args.checkpoint} is not the checkpoint step {given_step} started from: its sha256 is "
                f"{got[:16]}…, the bundle records {expected[:16]}…"
            )
    failed = 0
    for step in steps:
        verdict, prepared = replay_step(source, step, cfg)
        checkpoint = args.checkpoint if step == given_step else source.checkpoint(step)
        if checkpoint is not None:
            check_update(verdict, source.batches[step], cfg, prepared, checkpoint, model_path=args.model)
        else:
            verdict.notes.append(
                f"loss and grad norm not checked: no checkpoint step_{step:06d} (pass --checkpoint)"
            )
        print(_verdict_line(verdict, LOSS_RTOL))
        failed += not verdict.equal
    if len(steps) > 1:
        print(f"{len(steps) - failed} of {len(steps)} step(s) equal")
    return 1 if failed else 0


def _verdict_line(v: StepVerdict, rtol: float) -> str:
    head = f"step {v.step} (logged as {v.step + 1}): {v.episodes} episodes, {v.rows} rows, digest {v.digest[:12]}"
    lines = [f"{head}: {'equal' if v.equal else 'DIFFERS in ' + ', '.join(v.differences)}"]
    for name, (recorded, again) in v.update.items():
        how = (
            "bit for bit"
            if recorded == again
            else f"relative difference {abs(recorded - again) / max(abs(recorded), 1e-30):.1e}, tolerance {rtol:.0e}"
        )
        lines.append(f"  {name}: recorded {recorded!r}, recomputed {again!r} ({how})")
    lines += [f"  {note}" for note in v.notes]
    return "\n".join(lines)
