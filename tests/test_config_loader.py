"""load_config: YAML + overrides -> pydantic model, with one-line errors that name the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import pytest
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rllm.utils.config import (
    ConfigError,
    config_keys,
    config_to_yaml,
    describe_config,
    did_you_mean,
    dump_config,
    is_config_key,
    load_config,
    unknown_name,
)


class LoraConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rank: int = Field(16, description="LoRA adapter rank")
    alpha: float = Field(32.0, description="LoRA scaling numerator")


class OptimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-6, gt=0, description="Adam learning rate")
    epochs: int = Field(1, description="passes over the dataset")
    stop: list[str] = Field(default_factory=list, description="stop strings for sampling")
    estimator: Literal["grpo", "rloo"] = Field("grpo", description="advantage estimator")


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("run", description="run name, used for the run folder")
    trainer: OptimConfig = Field(default_factory=OptimConfig, description="optimizer settings")
    lora: Optional[LoraConfig] = Field(None, description="train a LoRA adapter; null = full fine-tune")  # noqa: UP045
    resume: bool = False


def _error(overrides: list[str], yaml_path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(RunConfig, yaml_path, overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults_without_yaml_or_overrides() -> None:
    assert load_config(RunConfig) == RunConfig()


def test_override_values_are_parsed_as_yaml_scalars() -> None:
    cfg = load_config(
        RunConfig, None, ["trainer.lr=1e-5", "lora.rank=8", "trainer.stop=[a,b]", "resume=true"]
    )
    assert cfg.trainer.lr == pytest.approx(1e-5)
    assert cfg.lora == LoraConfig(rank=8)
    assert cfg.trainer.stop == ["a", "b"]
    assert cfg.resume is True


def test_yaml_then_overrides_precedence(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("name: from-yaml\ntrainer:\n  lr: 0.001\n  epochs: 3\n  stop: [x, y, z]\n")
    cfg = load_config(RunConfig, path, ["trainer.epochs=5", "trainer.stop=[q]", "trainer.epochs=7"])
    assert cfg.name == "from-yaml"  # YAML over default
    assert cfg.trainer.lr == pytest.approx(1e-3)  # untouched YAML key kept
    assert cfg.trainer.epochs == 7  # override over YAML; the last override wins
    assert cfg.trainer.stop == ["q"]  # a list override replaces the list, no merging


def test_unknown_key_top_level_suggests_closest() -> None:
    message = _error(["resum=true"])
    assert message == "unknown config key 'resum' — did you mean 'resume'?"


def test_unknown_key_nested_names_full_dotted_key() -> None:
    assert "unknown config key 'trainer.lrr' — did you mean 'trainer.lr'?" == _error(["trainer.lrr=1"])
    assert "did you mean 'lora.rank'?" in _error(["lora.rnk=4"])
    assert "did you mean 'trainer'?" in _error(["trainr.lr=1"])


def test_unknown_key_at_wrong_level_suggests_where_it_lives() -> None:
    assert "'trainer.lr'" in _error(["lr=0.1"])


def test_unknown_key_in_yaml(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("trainer:\n  epoch: 2\n")
    assert "unknown config key 'trainer.epoch' — did you mean 'trainer.epochs'?" in _error([], path)


def test_unknown_key_without_close_match_points_to_help() -> None:
    assert "--help-config" in _error(["zzzzzz=1"])


def test_type_errors_are_one_line_with_key_and_value() -> None:
    assert _error(["trainer.lr=abc"]) == "config key 'trainer.lr' expects a number, got 'abc'"
    assert "config key 'trainer.epochs' expects an integer" in _error(["trainer.epochs=1.5"])
    assert "config key 'resume' expects a boolean" in _error(["resume=maybe"])
    assert "'grpo'" in _error(["trainer.estimator=ppo"])
    assert "greater than 0" in _error(["trainer.lr=-1"])


def test_several_problems_are_joined_on_one_line() -> None:
    message = _error(["trainer.lrr=1", "trainer.epochs=x"])
    assert "'trainer.lrr'" in message and "'trainer.epochs'" in message


def test_malformed_override_explains_format() -> None:
    assert "key=value" in _error(["trainer.lr"])
    assert "key=value" in _error(["=3"])


def test_missing_yaml_file(tmp_path: Path) -> None:
    message = _error([], tmp_path / "nope.yaml")
    assert "not found" in message and "nope.yaml" in message


def test_round_trip_through_yaml_snapshot(tmp_path: Path) -> None:
    cfg = load_config(RunConfig, None, ["trainer.lr=3e-7", "lora.alpha=4", "trainer.stop=[x]"])
    path = dump_config(cfg, tmp_path / "snap" / "config.yaml")
    assert load_config(RunConfig, path) == cfg
    assert "lr: 3.0e-07" in config_to_yaml(cfg)


def test_round_trip_keeps_interpolation_like_text_literal(tmp_path: Path) -> None:
    cfg = RunConfig(name="prompt ${not_a_key} text")
    assert load_config(RunConfig, dump_config(cfg, tmp_path / "config.yaml")) == cfg


def test_config_keys_walks_nested_and_optional_models() -> None:
    keys = config_keys(RunConfig)
    assert keys[:3] == ["name", "trainer", "trainer.lr"]
    assert {"trainer.estimator", "lora", "lora.rank", "lora.alpha", "resume"} <= set(keys)


def test_describe_config_lists_types_defaults_and_descriptions() -> None:
    text = describe_config(RunConfig)
    row = next(line for line in text.splitlines() if line.startswith("trainer.lr "))
    assert "float" in row and "1.0e-06" in row and "Adam learning rate" in row
    assert "LoRA adapter rank" in text
    assert "'grpo' | 'rloo'" in text
    assert "null = full fine-tune" in text


# --- names a key takes: did-you-mean ----------------------------------------------------------------


class ChatSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["chat"] = "chat"
    turns: int = 1


class GridSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["grid"]
    size: int = 4


class TaggedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: Annotated[ChatSection | GridSection, Field(discriminator="kind")] = Field(
        default_factory=ChatSection
    )
    weights: dict[str, float] = Field(default_factory=dict)
    level: int = 0

    @field_validator("level")
    @classmethod
    def _small(cls, level: int) -> int:
        if level > 3:
            raise ValueError(f"level {level} is more than 3: pick 0 to 3")
        return level


def test_a_misspelt_literal_gets_did_you_mean() -> None:
    assert _error(["trainer.estimator=rlo"]) == (
        "config key 'trainer.estimator' expects one of 'grpo' or 'rloo', got 'rlo' — did you mean 'rloo'?"
    )
    assert (
        _error(["trainer.estimator=zzz"])
        == "config key 'trainer.estimator' expects one of 'grpo' or 'rloo', got 'zzz'"
    )


def test_a_misspelt_section_tag_names_the_tag_key_with_did_you_mean() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TaggedConfig, None, ["env.kind=gird"])
    assert str(info.value) == "config key 'env.kind': unknown env 'gird' — did you mean 'grid'?"
    assert load_config(TaggedConfig, None, ["env.kind=grid", "env.size=8"]).env == GridSection(
        kind="grid", size=8
    )


def test_a_validators_message_is_shown_as_written() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TaggedConfig, None, ["level=5"])
    assert str(info.value) == "config key 'level': level 5 is more than 3: pick 0 to 3"


def test_unknown_name_and_did_you_mean() -> None:
    assert did_you_mean("grop", ["grpo", "rloo"]) == " — did you mean 'grpo'?"
    assert did_you_mean("xyz", ["grpo", "rloo"]) == ""
    assert unknown_name("loss", "ppoo", ["ppo", "gspo"]) == "unknown loss 'ppoo' — did you mean 'ppo'?"
    assert unknown_name("loss", "xyz", ["ppo", "gspo"]) == "unknown loss 'xyz': choose one of gspo, ppo"
    assert (
        unknown_name("loss", "xyz", ["ppo"], where=" for role 'a'")
        == "unknown loss 'xyz' for role 'a': choose one of ppo"
    )


def test_is_config_key_walks_unions_mappings_and_sections() -> None:
    assert is_config_key(TaggedConfig, "env.size") and is_config_key(
        TaggedConfig, "env.turns"
    )  # either member
    assert is_config_key(TaggedConfig, "weights.anything") and is_config_key(TaggedConfig, "env.*")
    assert not is_config_key(TaggedConfig, "env.sizes") and not is_config_key(TaggedConfig, "level.*")
    assert is_config_key(RunConfig, "lora.rank") and not is_config_key(RunConfig, "lr")
