"""``rllm profile RUN``'s report: where a run's steps spend their time and memory, and what to change.

Reads what the run wrote: ``metrics.jsonl`` (the per-step ``time/*`` and ``perf/*`` metrics of
``rllm.trainer.profiler`` and the loop) and ``config.yaml`` (the keys the advice names, with their values).
Pure arithmetic over those files: no torch, so the report is quick beside a running training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# The step's phases, in loop order, as the loop times them (time/<name>_s); "other" is the rest of the step
# (logging, the run store, the staleness check).
PHASES = ("data", "rollout", "refill", "train", "sync")
# The update's parts (inside time/train_s).
TRAIN_PARTS = ("prepare", "old_logprobs", "ref_logprobs", "forward_backward", "optim")
MEMORY_LIMIT_GB = 6.0  # every shipped example should peak below this (issue 26)
# The distributed backend's per-step time in collectives (rllm.trainer.profiler.collective_metrics), in the
# order the report prints them.
COLLECTIVE_KEYS = (
    "profile/collective_s",
    "profile/collective_max_s",
    "profile/collective_exposed_s",
    "profile/collective_frac",
    "profile/collectives",
    "profile/rank_busy_s",
    "profile/collective_overhead_s",
)
COLLECTIVE_ADVICE_FRAC = 0.3  # the ranks wait on collectives this share of their working time or more


class NoMetricsError(ValueError):
    """RUN is not a run directory with a metrics.jsonl that holds training steps."""


@dataclass
class Profile:
    """The mean step of a run (warm-up step left out when there are three or more), and its peaks."""

    run_dir: Path
    steps: list[int]
    step_s: float
    phases: dict[str, float]  # phase -> mean seconds per step (PHASES, then "other")
    train_parts: dict[str, float]
    rates: dict[str, float]  # perf/*_tokens_per_s, perf/train_tflops, perf/mfu (means)
    memory: dict[str, float]  # perf/rss_*_gb and perf/cuda*_gb (maxima over the run)
    idle: dict[str, float]  # time/trainer_idle_s, time/sampler_idle_s (means)
    collectives: dict[
        str, float
    ]  # profile/collective_* etc. of the distributed backend (means; {} elsewhere)
    eval_s: float  # held-out evals over the whole run
    total_step_s: float  # the steps over the whole run
    config: dict[str, Any] = field(default_factory=dict)

    def share(self, seconds: float) -> float:
        return 100.0 * seconds / self.step_s if self.step_s > 0 else 0.0


def find_run(run: str | Path) -> Path:
    """A run directory: ``run`` itself, or ``runs/<run>``; refused with what to pass when neither has
    metrics."""
    for candidate in (Path(run), Path("runs") / str(run)):
        if (candidate / "metrics.jsonl").is_file():
            return candidate
    raise NoMetricsError(
        f"no metrics.jsonl in {run}: pass a run directory (trainer.run_dir/trainer.name, e.g. runs/default) "
        "of a run that logs to jsonl (trainer.loggers)"
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def load_profile(run_dir: Path) -> Profile:
    lines = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    steps = [line for line in lines if "time/step_s" in line]
    if not steps:
        raise NoMetricsError(f"{run_dir / 'metrics.jsonl'} holds no training step yet (no time/step_s)")
    # The first step pays one-off costs (allocator growth, kernel selection); left out when others remain.
    measured = steps[1:] if len(steps) >= 3 else steps

    def mean(key: str) -> float:
        return _mean([float(s[key]) for s in measured if key in s])

    def seconds(key: str) -> float:
        """Mean seconds a step, a step without the phase counted as 0 (a step whose groups were all
        filtered out has no update), so parts and their phase share one denominator."""
        return _mean([float(s.get(key, 0.0)) for s in measured])

    step_s = mean("time/step_s")
    phases = {p: seconds(f"time/{p}_s") for p in PHASES}
    phases["other"] = max(0.0, step_s - sum(phases.values()))
    memory: dict[str, float] = {}
    for line in steps:
        for key, value in line.items():
            if key.startswith("perf/") and key.endswith("_gb"):
                memory[key] = max(memory.get(key, 0.0), float(value))
    rate_keys = ("perf/rollout_tokens_per_s", "perf/train_tokens_per_s", "perf/train_tflops", "perf/mfu")
    config_file = run_dir / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
    return Profile(
        run_dir=run_dir,
        steps=[int(s["step"]) for s in measured],
        step_s=step_s,
        phases=phases,
        train_parts={p: seconds(f"time/{p}_s") for p in TRAIN_PARTS},
        rates={k: mean(k) for k in rate_keys if any(k in s for s in measured)},
        memory=memory,
        idle={
            k: mean(f"time/{k}_s")
            for k in ("trainer_idle", "sampler_idle")
            if any(f"time/{k}_s" in s for s in measured)
        },
        collectives={k: mean(k) for k in COLLECTIVE_KEYS if any(k in s for s in measured)},
        eval_s=sum(float(line["eval/time_s"]) for line in lines if "eval/time_s" in line),
        total_step_s=sum(float(s["time/step_s"]) for s in steps),
        config=config or {},
    )


def _key(config: dict[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def advice(p: Profile) -> list[str]:
    """Concrete changes the numbers call for, most pressing first; each names the config keys to change."""
    out = _time_advice(p) + _collective_advice(p) + _memory_advice(p)
    c = p.config
    staleness = int(_key(c, "rollout.max_staleness", 0) or 0)
    if staleness > 0 and p.idle.get("sampler_idle", 0.0) > 0.3 * p.step_s:
        out.append(
            f"the sampler is idle {p.share(p.idle['sampler_idle']):.0f} % of the step in async mode: let it run "
            f"further ahead (rollout.max_staleness, now {staleness})."
        )
    mfu = p.rates.get("perf/mfu")
    if mfu is not None and mfu < 0.2:
        out.append(
            f"MFU is {100 * mfu:.0f} %: the GPU waits on small matrix products; raise backend.micro_batch_size "
            f"(now {_key(c, 'backend.micro_batch_size', '?')}) and rollout.batch_size."
        )
    return out or ["no phase stands out: the step is balanced for this configuration."]


def _time_advice(p: Profile) -> list[str]:
    c = p.config
    lora = bool(_key(c, "lora.enabled", True))
    engine = _key(c, "inference.engine", "local")
    out = _rollout_advice(p, engine) + _train_advice(p, lora)
    if p.share(p.phases["sync"]) >= 15:
        hint = (
            "train LoRA adapters (lora.enabled=true): only the adapters travel"
            if not lora
            else f"only the adapters travel, so look at how the {engine} engine takes them (its weight-transfer "
            "mode, docs/architecture.md)"
        )
        out.append(f"the weight sync is {p.share(p.phases['sync']):.0f} % of the step: {hint}.")
    if p.share(p.phases["data"]) >= 5:
        out.append(
            f"picking the step's tasks takes {p.share(p.phases['data']):.0f} % of the step: load the dataset once "
            "into a local file (data.train_file) rather than building it per step."
        )
    if p.total_step_s > 0 and p.eval_s >= 0.25 * p.total_step_s:
        out.append(
            f"held-out evals took {p.eval_s:.0f} s against {p.total_step_s:.0f} s of steps: evaluate less often "
            f"(eval.every_steps, now {_key(c, 'eval.every_steps', '?')}) or on fewer tasks (data.test_size, now "
            f"{_key(c, 'data.test_size', '?')})."
        )
    return out


def _rollout_advice(p: Profile, engine: str) -> list[str]:
    c = p.config
    rollout = p.phases["rollout"] + p.phases["refill"]
    if p.share(rollout) < 50:
        return []
    ways = []
    if engine == "local":
        ways.append("move sampling to the vLLM pool (inference.engine=vllm, docs/vllm_notes.md)")
        ways.append(
            f"raise inference.max_batch_rows (now {_key(c, 'inference.max_batch_rows', '?')}) so more "
            "sequences decode together"
        )
    if not _key(c, "rollout.max_staleness", 0):
        ways.append("overlap sampling with training (rollout.max_staleness=1, docs/async.md)")
    ways.append(f"cut rollout.max_tokens (now {_key(c, 'rollout.max_tokens', '?')}) if answers are truncated")
    return [f"rollout is {p.share(rollout):.0f} % of the step: " + "; or ".join(ways) + "."]


def _train_advice(p: Profile, lora: bool) -> list[str]:
    c = p.config
    train = p.phases["train"]
    if p.share(train) < 50:
        return []
    ways = []
    if not lora:
        ways.append("train LoRA adapters instead of every weight (lora.enabled=true)")
    if _key(c, "backend.share_prefix", True) is False:
        ways.append("run each group's prompt once (backend.share_prefix=true)")
    old = p.train_parts["old_logprobs"]
    if old > 0.15 * train:
        ways.append(
            "take the engine's logprobs instead of a second forward pass (backend.old_logprobs=rollout; the "
            f"recompute is {100 * old / train:.0f} % of the update)"
        )
    if not str(_key(c, "backend.device", "auto")).startswith("cuda"):
        ways.append("train on a GPU (backend.device=cuda)")
    if not ways:
        ways.append(
            f"raise backend.micro_batch_size (now {_key(c, 'backend.micro_batch_size', '?')}) if memory allows"
        )
    return [f"the update is {p.share(train):.0f} % of the step: " + "; or ".join(ways) + "."]


def _collective_advice(p: Profile) -> list[str]:
    """The distributed ranks waiting on their collectives (exposed time over the ranks' working time)."""
    frac = p.collectives.get("profile/collective_frac")
    if frac is None or frac < COLLECTIVE_ADVICE_FRAC:
        return []
    c = p.config
    exposed = p.collectives.get("profile/collective_exposed_s", 0.0)
    busy = p.collectives.get("profile/rank_busy_s", 0.0)
    world = _key(c, "backend.distributed.world_size", "?")
    micro, batch = _key(c, "backend.micro_batch_size", "?"), _key(c, "rollout.batch_size", "?")
    more = (
        "give each rank more tokens per collective: FSDP2 gathers every layer once per micro-batch, so raise "
        f"backend.micro_batch_size (now {micro}) and rollout.batch_size (now {batch})"
    )
    fewer = (
        f"or use fewer ranks (backend.distributed.world_size, now {world}): a model that fits one device needs "
        "no sharding"
    )
    ways = [more, fewer]
    if _key(c, "backend.distributed.reshard_after_forward", True):
        ways.append(
            "or keep each layer gathered from forward to backward (backend.distributed.reshard_after_forward="
            "false: one all-gather per layer and micro-batch instead of two, for more memory)"
        )
    if _key(c, "backend.distributed.placement", "PACK") not in ("PACK", "STRICT_PACK"):
        ways.append("or keep the ranks on one node (backend.distributed.placement=STRICT_PACK)")
    return [
        f"the ranks wait on collectives {100 * frac:.0f} % of their working time ({exposed:.2f} of {busy:.2f} s "
        "a step): " + "; ".join(ways) + "."
    ]


def _memory_advice(p: Profile) -> list[str]:
    c = p.config
    peak = p.memory.get("perf/rss_peak_gb", 0.0)
    if peak < MEMORY_LIMIT_GB:
        return []
    phases = {ph: p.memory.get(f"perf/rss_peak_{ph}_gb", 0.0) for ph in ("rollout", "train", "sync")}
    # Each phase's value is the run's high-water mark at its end: the first to reach the top set the peak.
    top = max(phases.values())
    where = next(ph for ph, gb in phases.items() if gb >= 0.99 * top)
    micro = _key(c, "backend.micro_batch_size", "?")
    chunk = _key(c, "backend.logprob_chunk_tokens", 1024)
    if where == "train":
        tokens = _key(c, "backend.micro_batch_tokens", 2048)
        # a pass keeps activations for its padded tokens: the token budget bounds them whatever the rows' lengths
        ways = [
            f"lower backend.micro_batch_tokens (now {tokens})"
            if tokens
            else "bound the tokens per pass (backend.micro_batch_tokens=2048; it is 0, off)",
            f"lower backend.micro_batch_size (now {micro})",
        ]
        if not chunk:
            ways.insert(0, "compute logprobs in chunks (backend.logprob_chunk_tokens=1024; it is 0, off)")
        elif chunk > 1024:
            ways.append(f"lower backend.logprob_chunk_tokens (now {chunk})")
        if not _key(c, "backend.gradient_checkpointing", False):
            ways.append(
                "recompute activations (backend.gradient_checkpointing=true with backend.share_prefix=false)"
            )
        return [f"peak RSS {peak:.1f} GB, reached in the update: " + "; or ".join(ways) + "."]
    if where == "rollout":
        rows, concurrency = _key(c, "inference.max_batch_rows", "?"), _key(c, "rollout.max_concurrency", "?")
        line = (
            f"peak RSS {peak:.1f} GB, reached in the rollout: decode fewer sequences at once (inference.max_batch_rows, "
            f"now {rows}; rollout.max_concurrency, now {concurrency}) or shorter ones (rollout.max_tokens)."
        )
        return [line]
    return [f"peak RSS {peak:.1f} GB, reached in the weight sync: train LoRA adapters (lora.enabled=true)."]


def render(p: Profile) -> str:
    """The report as plain text (what ``rllm profile`` prints)."""
    rows = [
        f"run {p.run_dir}: steps {p.steps[0]}..{p.steps[-1]} (mean of {len(p.steps)}), {p.step_s:.2f} s a step"
    ]
    rows.append("")
    rows.append(f"{'phase':<22}{'s/step':>9}{'share':>8}")
    for name, seconds in p.phases.items():
        if seconds > 0 or name in ("rollout", "train", "sync"):
            rows.append(f"{name:<22}{seconds:>9.3f}{p.share(seconds):>7.0f}%")
        if name == "train":
            for part, s in p.train_parts.items():
                if s > 0:
                    rows.append(f"  {part:<20}{s:>9.3f}{p.share(s):>7.0f}%")
    for name, seconds in p.idle.items():
        rows.append(f"{name.replace('_', ' '):<22}{seconds:>9.3f}{p.share(seconds):>7.0f}%")
    if p.eval_s:
        rows.append(f"{'eval (whole run)':<22}{p.eval_s:>9.1f}")
    if p.rates:
        rows.append("")
        for key, value in p.rates.items():
            shown = f"{100 * value:.1f} %" if key == "perf/mfu" else f"{value:,.1f}"
            rows.append(f"{key.removeprefix('perf/'):<26}{shown:>14}")
    rows.extend(_collective_rows(p))
    if p.memory:
        rows.append("")
        for key in sorted(p.memory):
            rows.append(f"{key.removeprefix('perf/'):<26}{p.memory[key]:>11.2f} GB")
    rows.append("")
    rows.append("advice:")
    rows.extend(f"- {line}" for line in advice(p))
    return "\n".join(rows)


def _collective_rows(p: Profile) -> list[str]:
    """The distributed ranks' time in collectives, per rank (the mean over ranks); nothing elsewhere."""
    if not p.collectives:
        return []
    rows = ["", "collectives (distributed ranks; per rank, mean over ranks):"]
    labels = {
        "profile/collective_s": "in flight s/step",
        "profile/collective_max_s": "in flight, slowest rank",
        "profile/collective_exposed_s": "exposed (waited) s/step",
        "profile/rank_busy_s": "rank working s/step",
        "profile/collectives": "collectives/step",
        "profile/collective_overhead_s": "measuring s/step",
    }
    for key, label in labels.items():
        if key in p.collectives:
            rows.append(f"  {label:<24}{p.collectives[key]:>14.3f}")
    if "profile/collective_frac" in p.collectives:
        rows.append(f"  {'exposed / working':<24}{100 * p.collectives['profile/collective_frac']:>12.1f} %")
    return rows
