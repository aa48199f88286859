"""The one typed config of a training run: ``rllm train [config.yaml] key=value ...``.

Every key is typed, documented and validated; unknown keys are errors (with a did-you-mean) and
combinations a backend cannot honour are refused at start-up (see ``AgentTrainer.check``).
``rllm train --help-config`` prints every key with its default and meaning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidatorFunctionWrapHandler,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from rllm.algorithms.advantages import ADVANTAGE_ESTIMATORS, StdKind
from rllm.algorithms.losses import LossConfig
from rllm.algorithms.transforms import Credit, FilterConfig
from rllm.envs.registry import ENVS
from rllm.tools.named import tool_names
from rllm.trainer.backends import BACKENDS
from rllm.trainer.engines import ENGINES
from rllm.trainer.monitor_config import MonitorConfig
from rllm.types import DEFAULT_ADAPTER
from rllm.utils.config import did_you_mean, unknown_name
from rllm.utils.metrics import SINKS
from rllm.utils.registry import Registry
from rllm.workflows.coordinator import COORDINATOR, WORKER_STYLES


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


_S = TypeVar("_S", bound=BaseModel)


class _PluginSection(_Section):
    """A section whose ``config_tag`` key names a plug-in of ``plugins`` (``backend.name``,
    ``inference.engine``): its variants are these keys plus each plug-in's own options section."""

    config_tag: ClassVar[str] = "name"
    plugins: ClassVar[Registry[Any]]

    @classmethod
    def config_variants(cls) -> dict[str, type[_PluginSection]]:
        """The section of each registered plug-in (read by ``rllm.utils.config`` and the validator)."""
        tag = cls.config_tag
        return {p.name: _plugin_section(cls, tag, p.name, p.options) for p in cls.plugins.plugins()}

    @property
    def options(self) -> BaseModel | None:
        """The named plug-in's own options (``<section>.<name>.*``), or None when it registered none."""
        value = getattr(self, getattr(self, self.config_tag), None)
        return value if isinstance(value, BaseModel) else None


class ModelConfig(_Section):
    path: str = Field(
        "smollm2-135m",
        description="Built-in model name (smollm2-135m), a local Hugging Face model directory, or a hub id.",
    )


class LoraConfig(_Section):
    enabled: bool = Field(True, description="Train LoRA adapters (true) or all weights (false).")
    rank: int = Field(32, gt=0, description="LoRA rank r.")
    alpha: int = Field(64, gt=0, description="LoRA alpha; the update is scaled by alpha / rank.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: list[str] | str = Field(
        "all-linear",
        description="Modules to adapt: 'all-linear' or a list of module names (e.g. [q_proj, v_proj]).",
    )


_ADAPTER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


class RoleConfig(_Section):
    """The weights of one role (``roles.<role>.*``; a role is a trajectory name such as ``solver``)."""

    adapter: str = Field(
        description="The LoRA adapter this role samples with and trains (a name of letters, digits, _ and -); "
        "roles naming the same adapter share it."
    )
    lr: float | None = Field(
        None,
        gt=0,
        description="This adapter's peak learning rate (default optim.lr; same warm-up and schedule); roles "
        "that share an adapter must not give it two.",
    )
    init_adapter: str | None = Field(
        None,
        description="Start this role's adapter from a saved PEFT adapter directory (adapter_config.json and "
        "adapter_model.safetensors, e.g. an `rllm sft` run's final_model/adapter) instead of fresh (B = 0); "
        "its rank, alpha and target modules must be lora.*'s. A resumed run takes the adapter from its "
        "checkpoint instead; roles that share an adapter must not give it two.",
    )

    @field_validator("adapter")
    @classmethod
    def _adapter_name(cls, adapter: str) -> str:
        # It becomes a PEFT adapter name (a module key: no '.'), a directory (final_model/<adapter>) and a
        # vLLM LoRA name.
        if not _ADAPTER_NAME.fullmatch(adapter):
            raise ValueError(f"adapter name {adapter!r} must be letters, digits, '_' or '-' (e.g. solver)")
        return adapter


def role_adapters(roles: dict[str, RoleConfig]) -> dict[str, str]:
    """Role (trajectory name) -> the adapter it samples with and trains; roles not listed use ``default``."""
    return {role: r.adapter for role, r in roles.items()}


def adapter_names(roles: dict[str, RoleConfig]) -> list[str]:
    """Every adapter a run with ``roles`` trains: ``default`` (the unlisted roles') first, then the rest in
    the order ``roles`` first names them; [] without roles (one set of weights, as always)."""
    if not roles:
        return []
    return list(dict.fromkeys([DEFAULT_ADAPTER, *(r.adapter for r in roles.values())]))


def adapter_inits(roles: dict[str, RoleConfig]) -> dict[str, str]:
    """Adapter -> the saved PEFT adapter directory it starts from (``roles.<role>.init_adapter``); adapters
    not named here start fresh."""
    return {r.adapter: r.init_adapter for r in roles.values() if r.init_adapter is not None}


def adapter_lrs(roles: dict[str, RoleConfig], default_lr: float) -> dict[str, float]:
    """Each adapter's peak learning rate: its roles' ``lr``, else ``optim.lr``."""
    lrs = dict.fromkeys(adapter_names(roles), default_lr)
    lrs.update({r.adapter: r.lr for r in roles.values() if r.lr is not None})
    return lrs


class OptimConfig(_Section):
    lr: float = Field(
        5e-4,
        gt=0,
        description="Peak learning rate of AdamW (5e-4 suits LoRA: at 1e-3 a third of the default runs collapsed "
        "into one answer per task, docs/results.md; use ~1e-5 for full fine-tune).",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1.")
    beta2: float = Field(0.999, ge=0, lt=1, description="AdamW beta2.")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    grad_clip: float | None = Field(
        1.0, gt=0, description="Clip the global gradient norm to this; null = off."
    )
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps from 0 to lr.")
    schedule: Literal["constant", "cosine", "linear"] = Field(
        "constant", description="Learning-rate schedule after warm-up (decays to 0 at trainer.steps)."
    )


class DistributedConfig(_Section):
    world_size: int = Field(
        2, gt=0, description="Trainer ranks (Ray actors, one torch.distributed group, FSDP2 shards)."
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join ('auto', or 'host:port' of its GCS); null starts a local cluster.",
    )
    cpus_per_rank: float = Field(1.0, gt=0, description="CPUs Ray reserves for each rank.")
    gpus_per_rank: float | None = Field(
        None,
        ge=0,
        description="GPUs Ray reserves for each rank; null: 1 when backend.device is cuda, else 0.",
    )
    placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK",
        description="Ray placement-group strategy for the ranks' bundles (PACK: as few nodes as possible).",
    )
    comm: Literal["auto", "gloo", "nccl"] = Field(
        "auto",
        description="torch.distributed backend: auto = nccl on cuda, gloo on cpu.",
    )
    reshard_after_forward: bool = Field(
        True,
        description="FSDP2: free gathered parameters after forward (ZeRO-3); false keeps them for backward (ZeRO-2).",
    )
    startup_timeout_s: float = Field(
        300.0, gt=0, description="Most seconds for the ranks to start and load the model."
    )
    profile_collectives: bool = Field(
        False,
        description="Measure each rank's time in collectives (torch.profiler around each call to a rank, "
        "host events and NCCL kernels only) and log profile/collective_* per step (docs/profiling.md); "
        "the profiler holds a call's events (about 1 GB more a rank on the 135M shape) and reading them takes "
        "time (1-2 % of a step), so it is off by default.",
    )


class BackendConfig(_PluginSection):
    """``backend.*``: the keys every backend shares, then ``backend.<name>.*``, the options model the backend
    named by ``backend.name`` registered (``rllm.trainer.backends.BACKENDS``)."""

    plugins: ClassVar[Registry[Any]] = BACKENDS

    name: str = Field(
        "local",
        description="Training backend: 'local' (PyTorch in this process), 'distributed' (FSDP2 ranks "
        "placed by Ray; backend.distributed.*), 'tinker' (a Tinker service; backend.tinker.*), or a "
        "registered plug-in (docs/plugins.md).",
    )
    device: str = Field(
        "auto", description="'auto' (cuda if available, else cpu), 'cpu', 'cuda' or 'cuda:N'."
    )
    autocast: Literal["auto", "bf16", "none"] = Field(
        "auto", description="Mixed precision for forward/backward: 'auto' uses bf16 where supported."
    )
    micro_batch_size: int = Field(
        16, gt=0, description="Sequences per forward/backward pass (gradients accumulate)."
    )
    micro_batch_tokens: int = Field(
        2048,
        ge=0,
        description="At most this many padded tokens (rows x the micro-batch's longest row) per forward/backward "
        "pass, besides micro_batch_size's rows: the activations a pass keeps grow with its tokens (about 1 MB a "
        "token on SmolLM2-135M), so long multi-turn rows train a few at a time and short ones micro_batch_size at "
        "a time; a longer row runs alone. Same results (gradients accumulate; docs/profiling.md); 0 = rows only.",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in backward to save memory."
    )
    attn_implementation: Literal["auto", "eager", "sdpa"] = Field(
        "auto",
        description="Attention kernel for training: 'auto' = eager on CPU (faster backward at RL lengths) for "
        "micro-batches of rows up to 256 tokens and sdpa for longer rows (eager keeps a [heads x T x T] matrix per "
        "layer), sdpa on GPU.",
    )
    share_prefix: bool = Field(
        True,
        description="Run each distinct prompt once per micro-batch and only the answers per sequence (exact; "
        "a group of G answers costs one prompt instead of G). Needs gradient_checkpointing=false.",
    )
    old_logprobs: Literal["rollout", "recompute"] = Field(
        "rollout",
        description="Behaviour logprobs for the ratio: the inference engine's ('rollout') or a trainer forward "
        "pass before the update ('recompute').",
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=0,
        description="Trained tokens projected to the vocabulary at a time when computing logprobs; each chunk's "
        "float32 logits are recomputed in the backward instead of kept, so memory grows with the chunk, not "
        "the sequence (docs/profiling.md). Same results; 0 = all tokens of a micro-batch at once.",
    )


class VLLMServerSettings(_Section):
    tensor_parallel_size: int | None = Field(None, gt=0, description="This server's tensor parallel size.")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="This server's GPU memory fraction."
    )
    extra_args: list[str] | None = Field(
        None, description="This server's extra vLLM arguments (replace the pool's)."
    )
    devices: str | None = Field(
        None,
        description="This server's CUDA_VISIBLE_DEVICES (e.g. '4,5'), so servers and trainer ranks use "
        "different GPUs of a node; null: inherited.",
    )


class VLLMPoolConfig(_Section):
    num_servers: int = Field(
        1, gt=0, description="vLLM servers to start (ignored in favour of urls when given)."
    )
    urls: list[str] = Field(
        default_factory=list,
        description="Attach to these running vLLM servers instead of starting any "
        "(each must have been started with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True for LoRA runs).",
    )
    tensor_parallel_size: int = Field(1, gt=0, description="Tensor parallel size of each started server.")
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="GPU memory fraction of each started server."
    )
    max_lora_rank: int | None = Field(
        None, gt=0, description="--max-lora-rank of started servers; null: lora.rank."
    )
    extra_args: list[str] = Field(
        default_factory=list, description="Extra vLLM command-line arguments for each server."
    )
    servers: list[VLLMServerSettings] = Field(
        default_factory=list,
        description="Per-server overrides, one entry per started server (length num_servers).",
    )
    python: str | None = Field(
        None,
        description="Python of the vLLM venv; null: $RLLM_VLLM_VENV/bin/python or .venv-vllm (scripts/setup_vllm.sh).",
    )
    dtype: str = Field(
        "float32",
        description="vLLM --dtype (float32 keeps its logprobs within ~5e-5 of the trainer's on CPU).",
    )
    kvcache_space_gib: int = Field(2, gt=0, description="CPU build only: KV cache GiB per server.")
    startup_timeout_s: float = Field(600.0, gt=0, description="Most seconds for a server to answer /health.")
    call_timeout_s: float = Field(
        600.0,
        gt=0,
        allow_inf_nan=False,
        description="Most seconds one call may wait for a server's answer; a call that gets none (a hung "
        "server) is retried on another server, and the server is skipped until its /health answers again.",
    )
    gateway_workers: int = Field(
        1,
        gt=0,
        description="Gateway processes between the workflow runner and the servers (sessions are routed "
        "to one by hash; they share one trace store).",
    )
    sync_dir: str | None = Field(
        None,
        description="Directory the trainer writes synced adapters/weights to, read by the servers (a shared "
        "filesystem on a cluster); null: run_dir/name/weight_sync.",
    )


class InferenceConfig(_PluginSection):
    """``inference.*``: the engine's name, the local engine's two keys, then ``inference.<engine>.*``, the
    options model the engine registered (``rllm.trainer.engines.ENGINES``)."""

    config_tag: ClassVar[str] = "engine"
    plugins: ClassVar[Registry[Any]] = ENGINES

    engine: str = Field(
        "local",
        description="Inference engine for rollouts: 'local' (in-process PyTorch), 'vllm' (a pool of vLLM "
        "servers behind the gateway; inference.vllm.*), 'tinker' (the sampler of backend.name=tinker, "
        "which picks it by default), or a registered plug-in.",
    )
    dtype: str = Field(
        "auto", description="Local engine weight dtype: auto (bf16 where native), bfloat16, float32."
    )
    max_batch_rows: int = Field(
        128, gt=0, description="Local engine: most sequences decoded together in one batch."
    )


_PLUGIN_SECTIONS: dict[tuple[type, str, Any], type[BaseModel]] = {}


def _plugin_section(base: type[_S], tag: str, name: str, options: Any) -> type[_S]:
    """``base`` for plug-in ``name``: its ``tag`` fixed to ``name`` and, when the plug-in has an options
    model, a field ``name`` holding them (``backend.distributed.world_size``)."""
    key = (base, name, options)
    if key not in _PLUGIN_SECTIONS:
        fields: dict[str, Any] = {tag: (Literal[name], name)}  # type: ignore[valid-type]
        if options is not None and name in base.model_fields:
            raise TypeError(
                f"plug-in {name!r} has options, and its section already has a key {name!r}: register it "
                "under another name"
            )
        if options is not None:
            if not (isinstance(options, type) and issubclass(options, BaseModel)):
                raise TypeError(f"plug-in {name!r}: options must be a pydantic model class, not {options!r}")
            fields[name] = (options, Field(default_factory=options, description=f"{name}'s own options."))
        _PLUGIN_SECTIONS[key] = create_model(  # type: ignore[call-overload]
            f"{base.__name__}_{name}", __base__=base, **fields
        )
    return _PLUGIN_SECTIONS[key]  # type: ignore[return-value]


class RolloutConfig(_Section):
    batch_size: int = Field(8, gt=0, description="Tasks per training step.")
    group_size: int = Field(8, gt=0, description="Episodes per task (the advantage group size).")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature for training rollouts.")
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Nucleus sampling threshold (1.0 = off). Local engine only: vLLM's logprobs after "
        "top-p are renormalised, which the trainer cannot reproduce, so inference.engine=vllm refuses < 1.",
    )
    top_k: int = Field(0, ge=0, description="Top-k sampling (0 = off; refused with inference.engine=vllm).")
    max_tokens: int = Field(32, gt=0, description="Most tokens per model response.")
    max_concurrency: int = Field(256, gt=0, description="Episodes in flight at once.")
    timeout_s: float | None = Field(None, gt=0, description="Wall-clock limit per episode; null = none.")
    retries: int = Field(0, ge=0, description="Retries of a failed or timed-out episode.")
    max_staleness: int = Field(
        0,
        ge=0,
        description="0: the synchronous loop (rollout, then update, then sync). N > 0: async training; a "
        "rollout producer samples up to N steps ahead while the trainer updates, and no sample more than N "
        "weight versions old is trained on (docs/async.md).",
    )
    partial_rollouts: bool = Field(
        True,
        description="Async mode (max_staleness > 0): a weight sync does not wait for episodes in flight; they "
        "go on under the new weights (a call decoding on the local engine pauses and resumes from its "
        "prefix). false: a sync waits until the episodes in flight finish, so each is sampled under one "
        "version.",
    )
    gateway_batch_wait_ms: float = Field(
        5.0,
        ge=0,
        description="@rllm.rollout flows only: how long the engine waits for more HTTP calls to join "
        "a batch (calls of concurrent episodes arrive a few ms apart).",
    )


class ShapingConfig(_Section):
    format_regex: str | None = Field(
        None,
        description="Reward shaping: a regex every response must fully match (stripped) to earn format_bonus; "
        "null = off.",
    )
    format_bonus: float = Field(
        0.1, description="Added to a trajectory whose responses all match format_regex."
    )
    format_penalty: float = Field(
        0.0, ge=0, description="Subtracted from a trajectory whose responses do not all match."
    )
    overlong_buffer: int = Field(
        0,
        ge=0,
        description="DAPO soft overlong penalty: responses longer than rollout.max_tokens - overlong_buffer "
        "lose up to overlong_coef, linearly; 0 = off.",
    )
    overlong_coef: float = Field(1.0, ge=0, description="The overlong penalty at rollout.max_tokens.")


class DistillConfig(_Section):
    """On-policy distillation (``rllm.algorithms.distill``): a teacher scores the student's sampled tokens and
    each trained token's advantage becomes -coef x (student logprob - teacher logprob). Off unless a teacher
    is named; see docs/distillation.md."""

    teacher: str | None = Field(
        None,
        description="Distill from this teacher, loaded in the trainer's process (no grad, scored in batches): a "
        "model directory or a built-in model name. It must use the student's tokenizer. Not with teacher_url.",
    )
    teacher_url: str | None = Field(
        None,
        description="Distill from the model behind this OpenAI-compatible endpoint (its /v1 base URL) that returns "
        "prompt logprobs as vLLM does (/v1/completions with prompt_logprobs); probed at start-up. Not with teacher.",
    )
    teacher_model: str | None = Field(
        None, description="teacher_url: the model name to request (default: the first the endpoint lists)."
    )
    api_key_env: str | None = Field(
        None,
        description="teacher_url: the environment variable that holds the endpoint's API key (default: none).",
    )
    mode: Literal["alone", "add"] = Field(
        "alone",
        description="'alone': the advantage is -coef x the per-token reverse KL, the task reward is ignored "
        "(needs algorithm.filters.drop_zero_variance=false); 'add': that term is added to the task advantage.",
    )
    coef: float = Field(1.0, gt=0, description="Weight of the per-token reverse KL in the advantage.")
    micro_batch_size: int = Field(
        8, gt=0, description="teacher: rows per forward pass; teacher_url: requests in flight at once."
    )
    timeout_s: float = Field(120.0, gt=0, description="teacher_url: most seconds per scoring request.")

    @property
    def enabled(self) -> bool:
        return self.teacher is not None or self.teacher_url is not None

    @model_validator(mode="after")
    def _one_teacher(self) -> DistillConfig:
        if self.teacher is not None and self.teacher_url is not None:
            raise ValueError(
                "algorithm.distill.teacher and algorithm.distill.teacher_url are both set: name one teacher"
            )
        # Keys away from their defaults (a dumped config repeats every default, so "set" cannot mean "sent").
        changed = {k for k, f in DistillConfig.model_fields.items() if getattr(self, k) != f.default}
        for key in ("teacher_model", "api_key_env", "timeout_s"):
            if key in changed and self.teacher_url is None:
                raise ValueError(
                    f"algorithm.distill.{key} applies to a teacher_url only: drop it or set teacher_url"
                )
        touched = changed - {"teacher", "teacher_url"}
        if touched and not self.enabled:
            raise ValueError(
                f"algorithm.distill.{min(touched)} is set but no teacher is: set algorithm.distill.teacher "
                "or algorithm.distill.teacher_url"
            )
        return self


class AlgorithmConfig(_Section):
    advantage: str | dict[str, str] = Field(
        "grpo",
        description="Advantage estimator (grpo, dr_grpo, rloo, reinforce, reinforce_pp, or one registered in "
        "rllm.algorithms.ADVANTAGE_ESTIMATORS), or a mapping role -> estimator with 'default' as fallback.",
    )
    norm_std: bool = Field(True, description="grpo: divide by the group's reward std.")
    std: StdKind = Field(
        "sample",
        description="The std grpo (per group, with norm_std) and reinforce_pp (per batch) divide by: 'sample' "
        "(Bessel-corrected, n - 1: TRL's and verl's convention) or 'population' (n; advantages sqrt(n/(n-1)) "
        "times larger, 7% at a group of 8).",
    )
    credit: Credit = Field(
        "trajectory",
        description="Credit assignment: 'trajectory' broadcasts each trajectory's advantage to all its steps; "
        "'per_step' gives each step its discounted return (gamma) and compares steps within the group; "
        "'per_state' (GiGPO) adds to the trajectory's advantage step_weight x the step's discounted return "
        "compared only with the group's steps that saw the same state (the same prompt).",
    )
    gamma: float = Field(1.0, ge=0, le=1, description="per_step / per_state credit: discount per turn.")
    step_weight: float = Field(1.0, ge=0, description="per_state credit: weight of the step-level advantage.")
    merge_turns: bool = Field(
        True,
        description="Train consecutive turns of a trajectory as one sequence when they extend each other "
        "token for token (the environment's tokens in between are masked out).",
    )
    shaping: ShapingConfig = Field(default_factory=ShapingConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    loss_norm: Literal["kept", "sampled"] = Field(
        "kept",
        description="What the loss mean divides by when zero-variance groups are skipped: 'kept' = only the rows "
        "trained on (DAPO dynamic-sampling semantics: informative groups keep their weight as the policy improves), "
        "'sampled' = also the skipped rows (plain GRPO semantics: the filter then only saves compute).",
    )
    filters: FilterConfig = Field(default_factory=FilterConfig)
    distill: DistillConfig = Field(default_factory=DistillConfig)

    @model_validator(mode="after")
    def _distill_alone_keeps_every_group(self) -> AlgorithmConfig:
        """Alone, distillation ignores the task reward: a filter on the reward's spread would drop rows the
        teacher has plenty to say about, so it is refused rather than quietly turned off."""
        if self.distill.enabled and self.distill.mode == "alone" and self.filters.drop_zero_variance:
            raise ValueError(
                "algorithm.distill.mode=alone ignores the task reward, but algorithm.filters.drop_zero_variance "
                "would drop groups whose rewards are equal: set algorithm.filters.drop_zero_variance=false "
                "(or algorithm.distill.mode=add)"
            )
        return self

    @field_validator("advantage")
    @classmethod
    def _known_estimators(cls, advantage: str | dict[str, str]) -> str | dict[str, str]:
        """Refused here, when the config loads, rather than at the first step's advantages."""
        by_role = {"": advantage} if isinstance(advantage, str) else advantage
        for role, name in by_role.items():
            if name not in ADVANTAGE_ESTIMATORS:
                where = f" for role {role!r}" if role else ""
                raise ValueError(unknown_name("advantage estimator", name, ADVANTAGE_ESTIMATORS, where=where))
        return advantage


class WorkflowConfig(_Section):
    """The ``workflow`` section. ``name`` picks the workflow, and that workflow's own options model (its
    ``options`` in ``WORKFLOWS``, or an environment's, with ``name`` fixed: ``workflow_variants()``)
    validates the rest, so each workflow and environment owns its knobs: ``workflow.history_turns`` on
    single_turn is an unknown key, not a silent no-op. Build one with ``workflow_config(name, ...)``."""

    name: str = Field(
        "single_turn",
        description="Workflow: single_turn (ask, score), tool_agent (ReAct loop with workflow.tools), "
        "solver_judge (workflow.n_solvers solvers, a judge picks), coordinator (workflow.workers answer the parts "
        "of a multi-part task, data.task=multi_part), flow (your own code: workflow.flow), one "
        "registered in rllm.trainer.config.WORKFLOWS, or a registered environment's name (a multi-turn game; "
        "needs data.task=<the same name>; docs/agents.md). Its options follow.",
    )

    @classmethod
    def config_variants(cls) -> dict[str, type[WorkflowConfig]]:
        """The options model of each workflow name (read by ``rllm.utils.config``)."""
        return workflow_variants()


class SingleTurnConfig(WorkflowConfig):
    """single_turn has no options of its own."""


class ToolAgentConfig(WorkflowConfig):
    max_turns: int = Field(4, gt=0, description="most model turns per episode.")
    tools: list[str] = Field(
        default_factory=lambda: ["calculator"],
        description="tools the agent may call, by name: calculator, python (sandboxed), or one registered "
        "with rllm.tools.register_tool.",
    )
    tool_timeout_s: float = Field(5.0, gt=0, description="time limit per tool call.")

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, tools: list[str]) -> list[str]:
        known = tool_names()
        for name in tools:
            if name not in known:
                raise ValueError(unknown_name("tool", name, known))
        if len(set(tools)) != len(tools):
            raise ValueError(f"{tools} names a tool twice: list each once")
        return tools


class SolverJudgeConfig(WorkflowConfig):
    n_solvers: int = Field(2, ge=2, description="solvers per episode.")


class CoordinatorConfig(WorkflowConfig):
    workers: dict[str, str] = Field(
        default_factory=lambda: {"worker_a": "plain", "worker_b": "worked_example"},
        description="coordinator: the worker roles (role name -> prompt style: plain = the sub-task's "
        "question alone, worked_example = a system prompt and one solved question of its kind first); at "
        "least 2, each a trajectory name with its own advantage group.",
    )
    exploration: float = Field(
        1.0,
        ge=0,
        description="coordinator: the UCB1 exploration weight c of the worker choice, rate + c * "
        "sqrt(ln N / n) per sub-task kind (every role is tried once first); 0 = greedy after that.",
    )
    worker_reward: Literal["reported", "exact"] = Field(
        "reported",
        description="coordinator: a worker's reward for its part. reported = the number its reply passes "
        "on (the last one, what the coordinator copies) is right, however worded ('3 + 2 = 5'); exact = "
        "the reply is that one number and nothing else.",
    )
    coordinator_reward: Literal["contribution", "final"] = Field(
        "contribution",
        description="coordinator: its own trajectory's reward. contribution = per part, right or its "
        "worker's answer passed on (a worker's mistake stays the worker's); final = the final answer's "
        "score against the truth (every worker's mistake lowers it too).",
    )
    constrain_final: bool = Field(
        True,
        description="coordinator: hold its final answer to one number per part separated by ', ' "
        "(grammar-constrained decoding; needs an engine with constraints, e.g. the local engine).",
    )

    @field_validator("workers")
    @classmethod
    def _worker_roles(cls, workers: dict[str, str]) -> dict[str, str]:
        if len(workers) < 2:
            raise ValueError(
                f"the coordinator needs at least 2 worker roles to choose from, got {list(workers)}"
            )
        for role, style in workers.items():
            if style not in WORKER_STYLES:
                raise ValueError(
                    unknown_name("worker style", style, WORKER_STYLES, where=f" for worker {role!r}")
                )
            if role == COORDINATOR or not role.isidentifier():
                raise ValueError(f"worker role {role!r}: use a name like worker_a (not {COORDINATOR!r})")
        return workers


class FlowConfig(WorkflowConfig):
    """Your own flow, named by import path (``rllm init`` projects use it; docs/init.md)."""

    flow: str = Field(
        description="module:attribute (importable from the directory rllm runs in) or path.py:attribute: "
        "an @rllm.rollout agent, a workflow object, or an async function (task, ctx) -> Outcome.",
    )
    evaluator: str | None = Field(
        None,
        description="module:attribute of the @rllm.evaluator that scores an @rllm.rollout flow; null: the "
        "flow scores itself.",
    )

    @field_validator("flow", "evaluator")
    @classmethod
    def _import_path(cls, spec: str | None) -> str | None:
        """The shape is checked when the config loads; the import, at start-up (rllm.trainer.project)."""
        if spec is not None:
            where, sep, attr = spec.rpartition(":")
            if not (sep and where and attr.isidentifier()):
                raise ValueError(
                    f"{spec!r} should be module:attribute or path/to/file.py:attribute (e.g. agent:solve)"
                )
        return spec


WorkflowBuilder = Callable[..., Any]
"""``build(cfg: TrainConfig, scoring: dict) -> workflow``: the workflow ``cfg.workflow`` names. ``scoring``
holds ``reward_fn`` and ``instruction`` (the dataset's reward and its answer format), or nothing when the
dataset names no reward."""


def _check_builder(name: str, build: object) -> None:
    if not callable(build):
        raise TypeError(f"workflow {name!r} needs a builder (cfg, scoring) -> workflow, not {build!r}")


WORKFLOWS: Registry[WorkflowBuilder] = Registry(
    "workflow", group="rllm.workflows", key="workflow.name", check=_check_builder
)
"""The workflows ``workflow.name`` can name (environments too, from ``rllm.envs.ENVS``): each a builder,
with its options model (a pydantic model; its fields are the ``workflow.*`` keys the workflow owns)."""

WORKFLOWS.register(
    "single_turn",
    "rllm.trainer.workflows:build_single_turn",
    options=SingleTurnConfig,
    description="ask, score",
)
WORKFLOWS.register(
    "tool_agent",
    "rllm.trainer.workflows:build_tool_agent",
    options=ToolAgentConfig,
    description="ReAct loop with workflow.tools",
)
WORKFLOWS.register(
    "solver_judge",
    "rllm.trainer.workflows:build_solver_judge",
    options=SolverJudgeConfig,
    description="workflow.n_solvers solvers, a judge picks",
)
WORKFLOWS.register(
    "coordinator",
    "rllm.trainer.workflows:build_coordinator",
    options=CoordinatorConfig,
    description="splits a multi-part task, assigns each part to a worker role by its running success",
)
WORKFLOWS.register(
    "flow", "rllm.trainer.project:build_flow", options=FlowConfig, description="your own code: workflow.flow"
)
_VARIANTS: dict[tuple[str, type[BaseModel]], type[WorkflowConfig]] = {}


def _variant(name: str, options: type[BaseModel] | None) -> type[WorkflowConfig]:
    """The workflow section of workflow ``name``: its options model, with ``name`` fixed to that name."""
    options = options or WorkflowConfig
    key = (name, options)
    if key not in _VARIANTS:
        bases = (options,) if issubclass(options, WorkflowConfig) else (options, WorkflowConfig)
        _VARIANTS[key] = create_model(  # type: ignore[call-overload]
            options.__name__ if issubclass(options, WorkflowConfig) else f"{options.__name__}Workflow",
            __base__=bases,
            __module__=options.__module__,
            name=(Literal[name], name),  # type: ignore[valid-type]
        )
    return _VARIANTS[key]


def workflow_variants() -> dict[str, type[WorkflowConfig]]:
    """Every workflow name ``workflow.name`` accepts, with its options model: the registered workflows,
    then one per registered environment (``rllm.envs.register_env``)."""
    table = {plugin.name: _variant(plugin.name, plugin.options) for plugin in WORKFLOWS.plugins()}
    for plugin in ENVS.plugins():
        table.setdefault(plugin.name, _variant(plugin.name, plugin.options))
    return table


def workflow_config(name: str = "single_turn", **options: Any) -> WorkflowConfig:
    """The ``workflow`` section for ``name`` with ``options`` (Python's ``workflow.name=... key=...``)."""
    return TrainConfig.model_validate({"workflow": {"name": name, **options}}).workflow


def _unknown_workflow(name: Any) -> ValidationError:
    known = workflow_variants()
    environments = [n for n in known if n not in WORKFLOWS]
    message = f"unknown workflow {name!r}" + (
        did_you_mean(name, known, n=3)
        or f": choose one of {', '.join(WORKFLOWS)}, or an environment "
        f"({', '.join(environments) or 'none registered'})"
    )
    error = PydanticCustomError("unknown_name", "{message}", {"message": message})
    return ValidationError.from_exception_data(
        "WorkflowConfig", [{"type": error, "loc": ("name",), "input": name}]
    )


class DataConfig(_Section):
    task: str = Field(
        "larger",
        description="Dataset to train on: built-in (larger, smaller, add, multiply, count_letter, "
        "countdown, code_problems, multi_part, or an environment's task family), registered, or pulled from the "
        "catalog (rllm dataset list).",
    )
    train_split: str = Field("train", description="Split of data.task to train on.")
    test_split: str = Field("test", description="Split of data.task for the held-out eval.")
    train_size: int = Field(
        20000, gt=0, description="Most training tasks (a generated dataset makes this many)."
    )
    test_size: int = Field(200, gt=0, description="Most held-out test tasks.")
    train_file: str | None = Field(
        None,
        description="A JSONL, JSON, CSV or parquet file of training tasks (question, ground_truth, ...) used "
        "instead of data.task's train split; relative to the directory rllm runs in.",
    )
    test_file: str | None = Field(
        None, description="A file of held-out tasks, as data.train_file, instead of data.task's test split."
    )
    reward: str | None = Field(
        None, description="Reward that scores replies (docs/rewards.md); null: the dataset's."
    )
    instruction: str = Field(
        "auto",
        description="Appended to each question: auto (the answer format the reward reads, e.g. "
        "\\boxed{} for math), '' (nothing), or your own text.",
    )
    system_prompt: str | None = Field(None, description="Optional system message before each question.")


class EvalConfig(_Section):
    every_steps: int = Field(
        8, ge=0, description="Greedy held-out eval every k steps (0 = only before/after)."
    )
    before: bool = Field(True, description="Evaluate the initial model before training.")
    after: bool = Field(True, description="Evaluate the final model after training.")
    max_tokens: int = Field(32, gt=0, description="Most tokens per eval response.")


class TrainerConfig(_Section):
    steps: int = Field(32, gt=0, description="Optimizer steps to run.")
    seed: int = Field(0, description="Seed for data order, sampling and initialisation.")
    run_dir: str = Field("runs", description="Parent directory of run directories.")
    name: str = Field("default", description="Run name; the run lives in run_dir/name.")
    resume: bool = Field(False, description="Continue from the latest checkpoint in the run directory.")
    checkpoint_every: int = Field(
        0, ge=0, description="Save a checkpoint every k steps (0 = only at the end)."
    )
    keep_checkpoints: int = Field(2, gt=0, description="How many step checkpoints to keep.")
    loggers: list[str] = Field(
        default_factory=lambda: ["console", "jsonl"],
        description="Metric sinks: console, jsonl, tensorboard (needs rllm[tensorboard]), wandb (needs "
        "rllm[wandb]), mlflow (needs rllm[mlflow]), or one registered in rllm.utils.metrics.SINKS.",
    )
    # The experiment trackers' options (docs/ui.md "W&B and MLflow"); each applies only when its sink is in
    # trainer.loggers (check_tracker_options).
    wandb_project: str = Field("rllm", min_length=1, description="wandb logger: the W&B project of the run.")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline",
        description="wandb logger: offline (files under the run directory, upload later with `wandb sync`) "
        "or online (needs `wandb login` and the network).",
    )
    mlflow_tracking_uri: str | None = Field(
        None,
        description="mlflow logger: the tracking store (sqlite:///path.db keeps artifacts in mlartifacts/ "
        "beside the file; http://server:5000 ...); null = run_dir/name/mlflow.db (artifacts in "
        "run_dir/name/mlartifacts).",
    )
    mlflow_experiment: str = Field(
        "rllm", min_length=1, description="mlflow logger: the MLflow experiment the run is created in."
    )
    plot: bool = Field(
        True, description="Write metrics.png (reward/accuracy curves) at the end, if matplotlib is installed."
    )
    store_enabled: bool = Field(
        True,
        description="Record the run (config, metrics, sampled episodes with their tokens, status) in the run "
        "store that `rllm ui` shows (docs/ui.md).",
    )
    store: str | None = Field(
        None,
        description="Run store file (SQLite) shared by the runs of a workspace; null = $RLLM_STORE if set, "
        "else run_dir/rllm.db.",
    )
    store_episodes_per_step: int = Field(
        16,
        ge=0,
        description="Episodes recorded per step, spread evenly over the step's groups; every failed, "
        "timed-out or truncated episode is recorded in addition.",
    )
    threads: int | None = Field(None, gt=0, description="torch CPU threads (default: torch's choice).")
    profile_steps: list[int] = Field(
        default_factory=list,
        description="Steps (1-based, as in metrics.jsonl) to capture with torch.profiler: a chrome trace "
        "profile/step_<n>.json in the run directory each (docs/profiling.md).",
    )
    peak_tflops: float | None = Field(
        None,
        gt=0,
        description="The training device's peak dense bf16 TFLOPS for perf/mfu; null = the known value of the "
        "CUDA device's name (docs/profiling.md), none on CPU.",
    )

    @model_validator(mode="after")
    def _profile_steps_in_run(self) -> TrainerConfig:
        bad = [s for s in self.profile_steps if not 1 <= s <= self.steps]
        if bad:
            raise ValueError(
                f"trainer.profile_steps {bad} are not steps of this run: they count from 1 to trainer.steps "
                f"({self.steps}), as metrics.jsonl does"
            )
        return self

    @field_validator("loggers")
    @classmethod
    def _known_loggers(cls, loggers: list[str]) -> list[str]:
        """Refused when the config loads; whether a sink's package is installed, at start-up."""
        for name in loggers:
            if name not in SINKS:
                raise ValueError(unknown_name(SINKS.kind, name, SINKS))
        return loggers

    @model_validator(mode="after")
    def _tracker_options_need_their_logger(self) -> TrainerConfig:
        check_tracker_options(self)
        return self


TRACKER_OPTIONS = {
    "wandb": ("wandb_project", "wandb_mode"),
    "mlflow": ("mlflow_tracking_uri", "mlflow_experiment"),
}
"""The ``trainer`` keys each experiment-tracker sink reads (``rllm train`` and ``rllm sft`` alike)."""


def tracker_options(trainer: Any) -> dict[str, Any]:
    """The tracker keys of a ``trainer`` section, as :func:`rllm.utils.metrics.build_sinks` takes them."""
    return {key: getattr(trainer, key) for keys in TRACKER_OPTIONS.values() for key in keys}


def check_tracker_options(trainer: Any) -> None:
    """Refuse a tracker option set away from its default while its sink is not in ``trainer.loggers``
    (it would do nothing). A dumped config repeats every default, so "set" means "changed"."""
    fields = type(trainer).model_fields
    for sink, keys in TRACKER_OPTIONS.items():
        changed = [k for k in keys if getattr(trainer, k) != fields[k].default]
        if changed and sink not in trainer.loggers:
            raise ValueError(
                f"trainer.{changed[0]} applies to the {sink} logger only: add {sink} to trainer.loggers "
                f"or drop trainer.{changed[0]}"
            )


def _validate_plugin_section(
    base: type[_PluginSection], value: Any, handler: ValidatorFunctionWrapHandler
) -> Any:
    """Validate a ``base`` section (backend, inference) as the variant its ``config_tag`` names: the
    plug-in's own options become its ``<name>`` key; an unknown name is refused with a did-you-mean."""
    if isinstance(value, base):
        if type(value) is not base:
            return value
        value = value.model_dump(exclude_unset=True)
    if not isinstance(value, dict):
        return handler(value)  # pydantic's own "expects a mapping" error
    tag = base.config_tag
    name = value.get(tag, base.model_fields[tag].default)
    variants = base.config_variants()
    if not isinstance(name, str) or name not in variants:
        message = unknown_name(base.plugins.kind, name, base.plugins.names())
        error = PydanticCustomError("unknown_name", "{message}", {"message": message})
        raise ValidationError.from_exception_data(
            base.__name__, [{"type": error, "loc": (tag,), "input": name}]
        )
    return variants[name].model_validate(value)


class TrainConfig(_Section):
    """Everything ``rllm train`` reads."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    backend: SerializeAsAny[BackendConfig] = Field(default_factory=BackendConfig, validate_default=True)
    inference: SerializeAsAny[InferenceConfig] = Field(default_factory=InferenceConfig, validate_default=True)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    workflow: SerializeAsAny[WorkflowConfig] = Field(
        default_factory=lambda: workflow_variants()["single_turn"]()
    )
    data: DataConfig = Field(default_factory=DataConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    # The drift monitor and the reward-hacking detector (rllm.trainer.monitors, docs/monitoring.md).
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    roles: dict[str, RoleConfig] = Field(
        default_factory=dict,
        # --help-config lists roles.<role>.adapter, .lr and .init_adapter
        json_schema_extra={"key_name": "role"},
        description="Separate weights per role: roles.<role>.adapter names the LoRA adapter a role (a "
        "trajectory name, e.g. solver, judge) samples with and trains, roles.<role>.lr its optional learning "
        "rate, roles.<role>.init_adapter a saved adapter to start it from; roles not listed use the adapter "
        "'default'. Empty: one set of weights. Needs lora.enabled=true "
        "and an engine that serves several adapters (docs/agents.md, Separate weights per role).",
    )

    @field_validator("roles")
    @classmethod
    def _one_lr_per_adapter(cls, roles: dict[str, RoleConfig]) -> dict[str, RoleConfig]:
        seen: dict[str, tuple[str, float]] = {}
        for role, r in roles.items():
            if r.lr is None:
                continue
            other = seen.setdefault(r.adapter, (role, r.lr))
            if other[1] != r.lr:
                raise ValueError(
                    f"roles.{other[0]}.lr={other[1]:g} and roles.{role}.lr={r.lr:g} give adapter {r.adapter!r} "
                    "two learning rates: set one (or drop one)"
                )
        return roles

    @field_validator("roles")
    @classmethod
    def _one_init_per_adapter(cls, roles: dict[str, RoleConfig]) -> dict[str, RoleConfig]:
        seen: dict[str, tuple[str, str]] = {}
        for role, r in roles.items():
            if r.init_adapter is None:
                continue
            other = seen.setdefault(r.adapter, (role, r.init_adapter))
            if other[1] != r.init_adapter:
                raise ValueError(
                    f"roles.{other[0]}.init_adapter={other[1]} and roles.{role}.init_adapter={r.init_adapter} "
                    f"start adapter {r.adapter!r} from two adapters: set one (or drop one)"
                )
        return roles

    @model_validator(mode="before")
    @classmethod
    def _backend_picks_its_engine(cls, data: Any) -> Any:
        """A backend registered with an engine of its own (``tinker``: the service samples itself) gets it
        unless ``inference.engine`` says otherwise (the start-up checks refuse a pair that cannot work)."""
        if not isinstance(data, dict):
            return data
        backend, inference = data.get("backend"), data.get("inference")
        name = backend.get("name") if isinstance(backend, dict) else getattr(backend, "name", None)
        if not isinstance(name, str):
            return data
        engine = BACKENDS.plugin(name).extra.get("engine") if name in BACKENDS else None
        if engine is None:
            return data
        if inference is None:
            return {**data, "inference": {"engine": engine}}
        if isinstance(inference, dict) and "engine" not in inference:
            return {**data, "inference": {**inference, "engine": engine}}
        return data

    @field_validator("backend", mode="wrap")
    @classmethod
    def _backend_owns_its_options(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Validate the section with the options model of the backend it names."""
        return _validate_plugin_section(BackendConfig, value, handler)

    @field_validator("inference", mode="wrap")
    @classmethod
    def _engine_owns_its_options(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Validate the section with the options model of the engine it names."""
        return _validate_plugin_section(InferenceConfig, value, handler)

    @field_validator("workflow", mode="wrap")
    @classmethod
    def _workflow_owns_its_options(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Validate the section with the options model of the workflow it names."""
        if isinstance(value, WorkflowConfig) and type(value) is not WorkflowConfig:
            return value
        if isinstance(value, WorkflowConfig):
            value = value.model_dump(exclude_unset=True)
        if not isinstance(value, dict):
            return handler(value)  # pydantic's own "expects a mapping" error
        name = value.get("name", WorkflowConfig.model_fields["name"].default)
        variant = workflow_variants().get(name) if isinstance(name, str) else None
        if variant is None:
            raise _unknown_workflow(name)
        return variant.model_validate(value)
