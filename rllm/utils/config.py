"""Typed configuration: YAML file + ``key=value`` overrides, validated by a pydantic model.

A run's configuration is one pydantic model (``extra="forbid"`` at every level), so every key is typed,
documented by its ``Field(description=...)`` and checked before anything starts. This module is the edge
where text becomes that model:

    cfg = load_config(TrainConfig, "configs/gsm8k.yaml", ["optim.lr=1e-5", "lora.rank=8"])

Precedence, lowest to highest: the model's defaults, the YAML file, the overrides (in order). Every problem
is reported as one :class:`ConfigError` line that names the full dotted key and, for a misspelt key, the
closest valid ones (names a key takes, such as an estimator or a loss, get the same did-you-mean from
:func:`unknown_name`). :func:`dump_config` writes the snapshot a run directory keeps; loading it back gives
an equal model.
"""

from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException
from pydantic import BaseModel, ValidationError

__all__ = [
    "ConfigError",
    "config_keys",
    "config_to_yaml",
    "describe_config",
    "did_you_mean",
    "dump_config",
    "is_config_key",
    "load_config",
    "unknown_name",
]

ModelT = TypeVar("ModelT", bound=BaseModel)

# Pydantic error types -> what the key expects, in words a user reads.
_EXPECTS: dict[str, str] = {
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "a boolean (true/false)",
    "bool_parsing": "a boolean (true/false)",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
    "none_required": "null",
}
_MAX_PROBLEMS = 5  # more than this are summarised as "(and N more)" to keep the error one line


class ConfigError(ValueError):
    """The configuration cannot be used as given; the message is one line that says what to change.

    ``problems`` holds one line per problem found (the message joins them with ``"; "``).
    """

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        shown = self.problems[:_MAX_PROBLEMS]
        more = len(self.problems) - len(shown)
        message = "; ".join(shown) + (f" (and {more} more)" if more else "")
        super().__init__(message)


# ---------------------------------------------------------------------------------------- unknown names


def did_you_mean(name: object, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """`` — did you mean 'grpo'?`` for the ``choices`` closest to ``name``, or ``""`` when none is close.

    The one did-you-mean of rllm's errors: unknown config keys, and every name a key takes (estimators,
    losses, workflows, rewards, datasets ...), so they all read alike.
    """
    close = difflib.get_close_matches(str(name), sorted(set(choices)), n=n, cutoff=cutoff)
    return _suggestion(close)


def _suggestion(suggestions: Sequence[str]) -> str:
    return f" — did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""


def unknown_name(kind: str, name: object, choices: Iterable[str], *, where: str = "") -> str:
    """The one-line refusal of a name no registry holds, e.g. ``unknown advantage estimator 'grop' — did
    you mean 'grpo'?``; without a close match it lists the choices instead. ``where`` follows the name
    (``" for role 'solver'"``)."""
    choices = sorted(set(choices))
    hint = did_you_mean(name, choices)
    return f"unknown {kind} {name!r}{where}" + (hint or f": choose one of {', '.join(choices)}")


# --------------------------------------------------------------------------------------------- loading


def load_config(
    model_cls: type[ModelT],
    yaml_path: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> ModelT:
    """Build ``model_cls`` from its defaults, an optional YAML file and ``key=value`` overrides.

    Override values are parsed as YAML scalars/flow collections, so ``lr=1e-5`` is a float, ``rank=8``
    an int, ``resume=true`` a bool, ``stop=[a,b]`` a list and ``lora=null`` None. Nested keys are dotted
    (``optim.lr=1e-5``). OmegaConf interpolations (``${optim.lr}``) are resolved before validation;
    they can refer only to keys set in the YAML file or the overrides, not to model defaults.

    Raises:
        ConfigError: missing or malformed YAML, a malformed override, an unknown key (with did-you-mean
            suggestions) or a value of the wrong type.
    """
    merged = OmegaConf.create({})
    if yaml_path is not None:
        merged = _load_yaml(Path(yaml_path))
    dotlist = [_check_override(o) for o in overrides]
    try:
        if dotlist:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(dotlist))
        data = OmegaConf.to_container(merged, resolve=True)
    except (OmegaConfBaseException, yaml.YAMLError) as e:
        raise ConfigError(_omegaconf_message(e, overrides)) from e
    assert isinstance(data, dict)  # the root is always a mapping: created from {} or checked in _load_yaml
    try:
        return model_cls.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_explain(e, model_cls, data)) from e


def _load_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"config file '{path}' not found: pass the path of an existing YAML file")
    try:
        loaded = OmegaConf.load(path)
    except (OmegaConfBaseException, yaml.YAMLError) as e:
        raise ConfigError(f"config file '{path}' is not valid YAML: {_one_line(e)}") from e
    if not OmegaConf.is_dict(loaded):
        raise ConfigError(f"config file '{path}' must hold a mapping of keys at the top, not a list")
    return loaded


def _omegaconf_message(e: Exception, overrides: Sequence[str]) -> str:
    first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if isinstance(e, InterpolationKeyError):
        first_line += " (an interpolation can only refer to keys set in the YAML file or the overrides)"
    if getattr(e, "full_key", None):
        return f"cannot resolve config key '{e.full_key}': {first_line}"  # type: ignore[attr-defined]
    return f"cannot apply config overrides {list(overrides)}: {_one_line(str(e))}"


def _check_override(override: str) -> str:
    key, sep, _ = override.partition("=")
    key = key.strip()
    if not sep or not key or any(c.isspace() for c in key):
        raise ConfigError(
            f"config override {override!r} is not of the form key=value "
            "(e.g. optim.lr=1e-5, lora.rank=8, trainer.loggers=[console,jsonl], trainer.resume=true)"
        )
    return override.strip()


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


# ----------------------------------------------------------------------------- pydantic errors -> words


def _explain(error: ValidationError, model_cls: type[BaseModel], data: Any) -> list[str]:
    """One line per distinct problem; union branches failing on the same key are merged into one."""
    problems: dict[str, None] = {}  # ordered set of finished lines, or of keys with type problems
    expects: dict[str, list[str]] = {}  # key -> what each union branch wanted
    inputs: dict[str, Any] = {}
    names: dict[str, list[str]] = {}  # key -> the names a Literal/enum branch accepts (for did-you-mean)
    for err in error.errors(include_url=False):
        path = _input_path(err["loc"], data)
        key, kind, ctx = _dotted(path), err["type"], err.get("ctx", {})
        if kind == "extra_forbidden":
            problems[_unknown_key_message(model_cls, path, data)] = None
        elif (
            kind == "unknown_name"
        ):  # a name a section dispatches on (workflow.name): the message says it all
            problems[f"config key '{key}': {err['msg']}"] = None
        elif kind == "missing":
            problems[f"config key '{key}' is required but was not given"] = None
        elif kind in _EXPECTS or kind in ("literal_error", "enum"):
            wanted = _EXPECTS.get(kind) or f"one of {ctx.get('expected', '?')}"
            slot = f"\0type:{key}"  # filled in below, once every union branch has been seen
            problems[slot] = None
            inputs.setdefault(slot, err.get("input"))
            if wanted not in expects.setdefault(slot, []):
                expects[slot].append(wanted)
            if kind in ("literal_error", "enum"):
                names.setdefault(slot, []).extend(_quoted(ctx.get("expected")))
        elif kind == "union_tag_invalid":
            problems[_unknown_tag_message(path, ctx)] = None
        elif kind == "value_error":  # a validator's own message, which names the value itself
            problems[f"config key '{key}': {err['msg'].removeprefix('Value error, ')}"] = None
        else:
            msg = err["msg"][0].lower() + err["msg"][1:]
            problems[f"config key '{key}': {msg}, got {_short(err.get('input'))}"] = None
    return [
        f"config key '{p[6:]}' expects {' or '.join(expects[p])}, got {_short(inputs[p])}"
        + (did_you_mean(inputs[p], names[p]) if isinstance(inputs[p], str) and p in names else "")
        if p in expects
        else p
        for p in problems
    ]


def _quoted(text: object) -> list[str]:
    """The names in pydantic's ``"'a', 'b' or 'c'"``."""
    return re.findall(r"'([^']*)'", str(text or ""))


def _unknown_tag_message(path: Sequence[int | str], ctx: Mapping[str, Any]) -> str:
    """A section whose kind is chosen by a tag key (``workflow.name``) was given a tag no member has."""
    tag_key = _dotted([*path, ctx.get("discriminator", "").strip("'")])
    section = next((str(p) for p in reversed(path) if isinstance(p, str)), "name")  # e.g. 'workflow'
    return (
        f"config key '{tag_key}': {unknown_name(section, ctx.get('tag'), _quoted(ctx.get('expected_tags')))}"
    )


def _input_path(loc: tuple[int | str, ...], data: Any) -> list[int | str]:
    """Keep the parts of a pydantic ``loc`` that index the input (drop union-branch tags like 'int')."""
    path: list[int | str] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, Mapping) and (part in node or last):
            path.append(part)
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(part)
            node = node[part]
    return path


def _dotted(path: Sequence[int | str]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unknown_key_message(model_cls: type[BaseModel], path: list[int | str], data: Any = None) -> str:
    key = _dotted(path)
    parent, leaf = path[:-1], str(path[-1])
    owner = _model_at(model_cls, parent, data)
    elsewhere = _variants_with(model_cls, parent, leaf)
    if owner is not None and elsewhere:  # a knob of another workflow (workflow.history_turns on single_turn)
        tag, values = elsewhere
        current = getattr(owner.model_fields.get(tag), "default", "?")
        section = _dotted(parent)
        return (
            f"unknown config key '{key}': {section}.{tag}={current} has no such option, it belongs to "
            f"{' or '.join(f'{section}.{tag}={v}' for v in values)}"
        )
    all_keys = config_keys(model_cls)
    # The same name at another level is the strongest hint ('lr' in the wrong section gets 'optim.lr'), then
    # close siblings.
    suggestions = [k for k in all_keys if k.rsplit(".", 1)[-1] == leaf and k != key]
    if owner is not None:
        siblings = [_field_key(name, f) for name, f in owner.model_fields.items()]
        prefix = _dotted(parent) + "." if parent else ""
        suggestions += [prefix + s for s in difflib.get_close_matches(leaf, siblings, n=3, cutoff=0.6)]
    if not suggestions:  # a close name at another level
        leaves = {k: k.rsplit(".", 1)[-1] for k in all_keys}
        close = set(difflib.get_close_matches(leaf, list(leaves.values()), n=3, cutoff=0.8))
        suggestions = [k for k, v in leaves.items() if v in close]
    suggestions = list(dict.fromkeys(suggestions))[:3]
    if not suggestions:
        return f"unknown config key '{key}' (see `rllm train --help-config` for valid keys)"
    return f"unknown config key '{key}'{_suggestion(suggestions)}"


# ------------------------------------------------------------------------------ walking model fields


def _field_key(name: str, field: Any) -> str:
    """The key a user writes for a field: its validation alias if it has one."""
    alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
    return alias or name


def _unwrap(tp: Any) -> Any:
    """Strip ``Annotated`` and ``Optional``; from a union prefer a model member."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        models = [m for m in members if _is_model(_unwrap(m))]
        return _unwrap(models[0] if models else members[0]) if members else tp
    return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _variants(tp: Any) -> tuple[str, dict[str, type[BaseModel]]] | None:
    """A section whose ``name`` (or its ``config_tag``) picks the model of the rest declares
    ``config_variants()``: (the key it dispatches on, {its value: model})."""
    variants = getattr(tp, "config_variants", None) if _is_model(tp) else None
    return (getattr(tp, "config_tag", "name"), variants()) if variants is not None else None


def _pick_variant(tp: Any, node: Any) -> Any:
    """The variant of section ``tp`` that the input ``node`` names (or its default), else ``tp``."""
    variants = _variants(tp)
    if variants is None:
        return tp
    tag, table = variants
    value = node.get(tag) if isinstance(node, Mapping) and tag in node else tp.model_fields[tag].default
    return table.get(value, tp) if isinstance(value, str) else tp


def _variants_with(model_cls: type[BaseModel], parent: Sequence[int | str], leaf: str) -> Any:
    """(tag, [values]) of the variants of the section at ``parent`` that have a key ``leaf``."""
    base = _model_at(model_cls, parent)
    variants = _variants(base)
    if variants is None:
        return None
    tag, table = variants
    values = [v for v, m in table.items() if leaf in {_field_key(n, f) for n, f in m.model_fields.items()}]
    return (tag, values) if values else None


def _model_at(
    model_cls: type[BaseModel], path: Sequence[int | str], data: Any = None
) -> type[BaseModel] | None:
    """The model class that owns the keys at ``path`` (through nested, optional, list and dict fields);
    with the input ``data``, the variant of a dispatching section that the input names."""
    tp: Any = model_cls
    node = data
    for part in path:
        tp = _pick_variant(_unwrap(tp), node) if data is not None else _unwrap(tp)
        node = node.get(part) if isinstance(node, Mapping) else None
        origin = typing.get_origin(tp)
        if _is_model(tp) and isinstance(part, str):
            fields = {_field_key(n, f): f for n, f in tp.model_fields.items()}
            if part not in fields:
                return None
            tp = fields[part].annotation
        elif origin in (list, tuple, set, Sequence) and isinstance(part, int):
            tp = typing.get_args(tp)[0] if typing.get_args(tp) else Any
        elif origin in (dict, Mapping):
            tp = typing.get_args(tp)[1] if typing.get_args(tp) else Any
        else:
            return None
    tp = _pick_variant(_unwrap(tp), node) if data is not None else _unwrap(tp)
    return tp if _is_model(tp) else None


def _walk(
    model_cls: type[BaseModel],
    prefix: str = "",
    defaults: Any = None,
    only: Sequence[str] | None = None,
    note: str = "",
) -> list[tuple[str, Any, Any]]:
    """(dotted key, field info, effective default) for every field, sections before their keys; a
    dispatching section's base keys, then each variant's own (their descriptions led by ``note``)."""
    rows: list[tuple[str, Any, Any]] = []
    for name, field in model_cls.model_fields.items():
        if only is not None and name not in only:
            continue
        if note:
            field = copy.copy(field)
            field.description = note + (field.description or "")
        key = prefix + _field_key(name, field)
        if defaults is not None:
            default = getattr(defaults, name, None)
        elif field.is_required():
            default = _REQUIRED
        else:
            try:
                default = field.get_default(call_default_factory=True)
            except TypeError:  # a factory that needs the validated data; shown as "computed"
                default = _COMPUTED
        rows.append((key, field, default))
        sub = _unwrap(field.annotation)
        if _is_model(sub):
            sub_default = default if isinstance(default, BaseModel) else None
            rows.extend(_walk(sub, key + ".", sub_default))
            rows.extend(_walk_variants(sub, key, sub_default))
        elif typing.get_origin(sub) in (dict, Mapping) and _is_model(
            value := _unwrap(typing.get_args(sub)[1])
        ):
            # A mapping of sections (roles.<role>.adapter): its keys are the user's, named by the field's
            # json_schema_extra "key_name".
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            rows.extend(_walk(value, f"{key}.<{extra.get('key_name', 'name')}>."))
    return rows


def _walk_variants(base: type[BaseModel], key: str, defaults: Any) -> list[tuple[str, Any, Any]]:
    """The keys each variant of a dispatching section adds to its base (``workflow.max_turns`` ...)."""
    variants = _variants(base)
    if variants is None:
        return []
    tag, table = variants
    rows: list[tuple[str, Any, Any]] = []
    for value, variant in table.items():
        own = [n for n in variant.model_fields if n not in base.model_fields]
        its_defaults = defaults if type(defaults) is variant else None
        rows.extend(_walk(variant, key + ".", its_defaults, only=own, note=f"({key}.{tag}={value}) "))
    return rows


class _Marker:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


_REQUIRED = _Marker("required")
_COMPUTED = _Marker("computed")


def _members(tp: Any) -> list[Any]:
    """The types a value of ``tp`` may have: ``Annotated`` stripped, unions (and ``Optional``) expanded."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (Union, types.UnionType):
        return [m for a in typing.get_args(tp) for m in _members(a)]
    return [tp]


def _accepts(tp: Any, parts: Sequence[str], section: bool, *, variants: bool = True) -> bool:
    if not parts:
        return not section or any(_is_model(m) for m in _members(tp))
    for member in _members(tp):
        table = _variants(member) if variants else None
        if table is not None and any(_accepts(v, parts, section, variants=False) for v in table[1].values()):
            return True  # a key of the variant some value of the section's name picks
        if typing.get_origin(member) in (dict, Mapping):
            return True  # a mapping's keys are the user's own (e.g. algorithm.advantage.<role>)
        if _is_model(member):
            fields = {_field_key(n, f): f for n, f in member.model_fields.items()}
            if parts[0] in fields and _accepts(fields[parts[0]].annotation, parts[1:], section):
                return True
    return False


def is_config_key(model_cls: type[BaseModel], key: str) -> bool:
    """Whether ``model_cls`` accepts the dotted ``key`` (``algorithm.loss.name``), or ``section.*`` names
    one of its sections. Every member of a union of sections counts (a key of any of them is accepted),
    and a mapping-valued key accepts any sub-key (``algorithm.advantage.solver``)."""
    parts = key.split(".")
    section = parts[-1] == "*"
    return _accepts(model_cls, parts[:-1] if section else parts, section)


def config_keys(model_cls: type[BaseModel]) -> list[str]:
    """Every dotted key ``model_cls`` accepts, in declaration order.

    A nested (or optional nested) model contributes its own key (``lora``, which can be set to null)
    followed by its fields (``lora.rank``); a dict of models its key, then the model's fields under a
    placeholder (``roles.<role>.adapter``). Keys inside lists of models are not expanded.
    """
    return list(dict.fromkeys(key for key, _, _ in _walk(model_cls)))


# ----------------------------------------------------------------------------------------- describing


def _type_name(tp: Any) -> str:
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return "None"
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if a is Ellipsis else _type_name(a) for a in args)}]"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _default_text(default: Any) -> str:
    if isinstance(default, _Marker):
        return default.text
    if isinstance(default, BaseModel):
        return "(section)"
    if isinstance(default, Enum):
        default = default.value
    if isinstance(default, Path):
        default = str(default)
    return yaml.safe_dump(default, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def describe_config(model_cls: type[BaseModel]) -> str:
    """A plain-text table of every key: its type, default and description (for ``--help-config``).

    One row per key, never wrapped, so ``rllm train --help-config | grep lr`` finds a key.
    """
    rows = [("key", "type", "default", "description")]
    for key, field, default in _walk(model_cls):
        description = " ".join((field.description or "").split())
        rows.append((key, _type_name(field.annotation), _default_text(default), description))
    widths = [min(max(len(r[i]) for r in rows), cap) for i, cap in enumerate((48, 32, 24))]
    lines = []
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row[:3], widths)]
        lines.append("  ".join([*cells, row[3]]).rstrip())
    lines.insert(1, "  ".join("-" * w for w in [*widths, 11]))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ snapshots


def _escape_interpolations(value: Any) -> Any:
    """Make ``${...}`` in string values literal, so loading the snapshot does not try to resolve it."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, dict):
        return {k: _escape_interpolations(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_interpolations(v) for v in value]
    return value


def config_to_yaml(cfg: BaseModel) -> str:
    """The full configuration (defaults included) as YAML that :func:`load_config` reads back equal."""
    data = _escape_interpolations(cfg.model_dump(mode="json", by_alias=True))
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)


def dump_config(cfg: BaseModel, path: str | Path) -> Path:
    """Write the config snapshot (see :func:`config_to_yaml`) to ``path``, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_to_yaml(cfg), encoding="utf-8")
    return path
