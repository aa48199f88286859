"""Replay a recorded training step: its journaled episodes through ``prepare_batch`` again, no model needed.

A training run journals every episode of every step and, per step, what its batch and update produced
(``rllm.store.EpisodeJournal``, ``rllm.trainer.recovery.batch_summary``). ``replay_step`` takes the episodes
the step trained on (by their job keys, in batch order), runs shaping, grouping, filters, advantages and token
rows with the run's saved config, and compares the result with the record: every field digest of the token
rows, the prepare metrics, the row count. With the checkpoint the step started from (``step_<N>``: the
weights before step N's update) it also recomputes the loss and gradient norm on the local backend.

The data comes from a ``ReplaySource``: a run directory (``journal.db``, ``config.yaml``, ``checkpoints/``)
or a portable bundle (``write_bundle``: a tar.gz of the steps' episodes and batch records, the config and
the sha256 of each step's checkpoint), which another machine replays with the checkpoint passed by path.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm._version import __version__
from rllm.algorithms.prepare import PreparedBatch, batch_digests, prepare_batch, reward_shapers
from rllm.models import resolve_model
from rllm.store import EpisodeJournal
from rllm.store.journal import dumps
from rllm.trainer.backends import build_backend
from rllm.trainer.checkpoint import LOOP_STATE, checkpoint_dir, load_loop_state
from rllm.trainer.config import TrainConfig
from rllm.types import Episode
from rllm.utils.config import load_config

BUNDLE_FORMAT = 1
# The recomputed loss and gradient norm must match the recorded ones this closely (relative): on the
# machine and thread count of the run they are equal bit for bit; elsewhere kernels may sum in another order.
LOSS_RTOL = 1e-5


class ReplayError(ValueError):
    """Replay cannot run as asked (no such run, step or bundle; a checkpoint that is not the recorded one)."""


@dataclass
class ReplaySource:
    """A recorded run's steps, from its directory or from a bundle: the config, each step's episodes by job
    key and its batch record, and (for a bundle) the sha256 of the checkpoint each step started from."""

    name: str
    config_yaml: str
    episodes_by_step: dict[int, dict[str, Episode]]
    batches: dict[int, dict[str, Any]]
    checkpoint_hashes: dict[int, str] = field(default_factory=dict)
    run_dir: Path | None = None

    @property
    def steps(self) -> list[int]:
        """The steps with a batch record (a step killed before its update has none)."""
        return sorted(self.batches)

    def config(self) -> TrainConfig:
        """The run's config (its saved ``config.yaml``)."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.yaml"
            path.write_text(self.config_yaml)
            return load_config(TrainConfig, path)

    def checkpoint(self, step: int) -> Path | None:
        """The run directory's checkpoint that step ``step`` started from, if it is still there."""
        if self.run_dir is None:
            return None
        path = checkpoint_dir(self.run_dir, step)
        return path if (path / LOOP_STATE).exists() else None


def open_run(run_dir: str | Path) -> ReplaySource:
    """The replay source of a run directory (one with ``journal.db`` and ``config.yaml``)."""
    run_dir = Path(run_dir)
    for needed in ("journal.db", "config.yaml"):
        if not (run_dir / needed).exists():
            raise ReplayError(
                f"{run_dir} has no {needed}: not the directory of a training run that journals its episodes"
            )
    with EpisodeJournal(run_dir / "journal.db") as journal:
        steps = journal.steps()
        batches = {s: b for s in steps if (b := journal.batch(s)) is not None}
        episodes = {s: journal.episodes(s) for s in steps}
    return ReplaySource(
        name=run_dir.name,
        config_yaml=(run_dir / "config.yaml").read_text(),
        episodes_by_step=episodes,
        batches=batches,
        run_dir=run_dir,
    )


def open_bundle(path: str | Path) -> ReplaySource:
    """The replay source of a bundle written by ``write_bundle``."""
    try:
        with tarfile.open(path, "r:gz") as tar:

            def read(name: str) -> bytes:
                member = tar.extractfile(name)
                if member is None:
                    raise KeyError(name)
                return member.read()

            meta = json.loads(read("bundle.json"))
            if meta.get("format") != BUNDLE_FORMAT:
                raise ReplayError(
                    f"{path} is a replay bundle of format {meta.get('format')}, not {BUNDLE_FORMAT}"
                )
            steps = {}
            for step in meta["steps"]:
                steps[step] = json.loads(read(f"steps/step_{step:06d}.json"))
            config_yaml = read("config.yaml").decode()
    except (tarfile.TarError, KeyError, OSError, json.JSONDecodeError) as exc:
        raise ReplayError(f"{path} is not a readable replay bundle: {exc}") from exc
    return ReplaySource(
        name=meta["run"],
        config_yaml=config_yaml,
        episodes_by_step={
            s: {k: Episode.model_validate(e) for k, e in d["episodes"].items()} for s, d in steps.items()
        },
        batches={s: d["batch"] for s, d in steps.items() if d["batch"] is not None},
        checkpoint_hashes={int(s): h for s, h in meta["checkpoints"].items()},
    )


def write_bundle(source: ReplaySource, steps: list[int], out: str | Path) -> Path:
    """Write ``steps`` of ``source`` as a portable bundle at ``out`` (tar.gz): ``bundle.json`` (format,
    run, steps, the sha256 of each step's checkpoint found in the run directory), ``config.yaml`` and
    ``steps/step_<N>.json`` (the step's batch record and every journaled episode, by job key)."""
    out = Path(out)
    hashes = {str(s): checkpoint_sha256(c) for s in steps if (c := source.checkpoint(s)) is not None}
    meta = {
        "format": BUNDLE_FORMAT,
        "run": source.name,
        "steps": steps,
        "checkpoints": hashes,
        "rllm": __version__,
    }
    files = {"bundle.json": json.dumps(meta, indent=1), "config.yaml": source.config_yaml}
    for s in steps:
        episodes = {k: e.model_dump(mode="json") for k, e in source.episodes_by_step.get(s, {}).items()}
        files[f"steps/step_{s:06d}.json"] = dumps({"batch": source.batches.get(s), "episodes": episodes})
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def checkpoint_sha256(path: str | Path) -> str:
    """sha256 over a checkpoint directory: every file's relative path, size and bytes, in path order."""
    root = Path(path)
    h = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix().encode()
        h.update(len(rel).to_bytes(8, "little") + rel + file.stat().st_size.to_bytes(8, "little"))
        with file.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def checkpoint_step(path: str | Path) -> int:
    """The step a checkpoint directory was saved after (the step it starts)."""
    path = Path(path)
    if not (path / LOOP_STATE).exists():
        raise ReplayError(f"{path} is not a checkpoint directory (no {LOOP_STATE})")
    return int(load_loop_state(path)["step"])


@dataclass
class StepVerdict:
    """What replaying one step found: ``differences`` names each recorded field the replay did not
    reproduce (empty: equal); ``update`` holds (recorded, recomputed) loss and gradient norm when a
    checkpoint was available; ``notes`` say what was not checked, and why."""

    step: int
    episodes: int
    rows: int
    digest: str
    differences: list[str] = field(default_factory=list)
    update: dict[str, tuple[float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.differences


def replay_step(
    source: ReplaySource, step: int, config: TrainConfig | None = None
) -> tuple[StepVerdict, PreparedBatch]:
    """Prepare ``step``'s batch again from its journaled episodes and compare it with the record."""
    cfg = config or source.config()
    if cfg.algorithm.distill.enabled:
        raise ReplayError(
            f"{source.name} distilled from a teacher (algorithm.distill): its advantages are the teacher's "
            "logprobs, which replay does not recompute"
        )
    record = source.batches.get(step)
    if record is None:
        raise ReplayError(
            f"step {step} of {source.name} has no batch record (recorded steps: {source.steps}); a step "
            "killed before its update is recorded when the resumed run redoes it"
        )
    journaled = source.episodes_by_step.get(step, {})
    missing = [k for k in record["keys"] if k not in journaled]
    if missing:
        raise ReplayError(f"step {step}: the journal lacks episode(s) {missing[:5]} of the recorded batch")
    episodes = [journaled[k] for k in record["keys"]]
    shapers = reward_shapers(cfg.algorithm.shaping, max_tokens=cfg.rollout.max_tokens)
    prepared = prepare_batch(episodes, cfg.algorithm, shapers=shapers)
    verdict = StepVerdict(
        step=step,
        episodes=len(episodes),
        rows=len(prepared.batch) if prepared.batch is not None else 0,
        digest=prepared.digest(),
    )
    digests = batch_digests(prepared.batch)
    verdict.differences += [f"digests.{k}" for k, v in record["digests"].items() if digests.get(k) != v]
    if verdict.digest != record["digest"] and not verdict.differences:
        verdict.differences.append("digest")
    for name in sorted(set(record["metrics"]) | set(prepared.metrics)):
        if not _same(record["metrics"].get(name), prepared.metrics.get(name)):
            verdict.differences.append(f"metrics.{name}")
    if verdict.rows != record["rows"]:
        verdict.differences.append("rows")
    if prepared.empty != record["empty"]:
        verdict.differences.append("empty")
    if record.get("caller_shapers"):
        verdict.notes.append(
            f"the run shaped rewards with {record['caller_shapers']} shaper(s) passed in code, which replay "
            "cannot rerun: only the config's shaping was applied"
        )
    return verdict, prepared


def recompute_update(
    cfg: TrainConfig, prepared: PreparedBatch, checkpoint: Path, pad_id: int, *, model_path: str | None = None
) -> dict[str, float]:
    """The loss and gradient norm of one update on ``prepared`` from ``checkpoint``'s weights, on the local
    backend (as the trainer's ``_update`` computes them; the optimizer step taken after is discarded)."""
    import torch  # loaded only when a checkpoint is replayed (the local backend's dependency)

    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    local = cfg.model_copy(update={"backend": cfg.backend.model_copy(update={"name": "local"})})
    backend = build_backend(local, resolve_model(model_path or cfg.model.path), pad_id=pad_id)
    try:
        backend.load_state(checkpoint)
        batch = prepared.batch
        assert batch is not None
        old = backend.compute_logprobs(batch) if cfg.backend.old_logprobs == "recompute" else None
        ref = backend.compute_logprobs(batch, reference=True) if cfg.algorithm.loss.kl_coef > 0 else None
        out = dict(backend.forward_backward(batch, cfg.algorithm.loss, old_logprobs=old, ref_logprobs=ref))
        out.update(backend.optim_step())
        return out
    finally:
        backend.close()


def check_update(
    verdict: StepVerdict,
    record: dict[str, Any],
    cfg: TrainConfig,
    prepared: PreparedBatch,
    checkpoint: Path,
    *,
    model_path: str | None = None,
) -> None:
    """Recompute the step's loss and gradient norm from ``checkpoint``; a value off by more than
    ``LOSS_RTOL`` (relative) is a difference."""
    if prepared.empty or record.get("loss") is None:
        verdict.notes.append("the step skipped its update (no group with signal): no loss to check")
        return
    if record.get("temperature") is not None:  # the step's own (monitor.drift.adapt_temperature changes it)
        cfg = cfg.model_copy(
            update={"rollout": cfg.rollout.model_copy(update={"temperature": record["temperature"]})}
        )
    out = recompute_update(cfg, prepared, checkpoint, record.get("pad_id", 0), model_path=model_path)
    for name, key in (("loss", "train/loss"), ("grad_norm", "train/grad_norm")):
        recorded, again = float(record[name]), float(out[key])
        verdict.update[name] = (recorded, again)
        if not math.isclose(recorded, again, rel_tol=LOSS_RTOL, abs_tol=1e-12):
            verdict.differences.append(name)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b
