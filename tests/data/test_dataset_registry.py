"""DatasetRegistry: schema validation, exact parquet round trips, manifest, atomic writes, built-ins, files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rllm.data.registry import (
    DatasetNotFoundError,
    DatasetRegistry,
    InvalidTaskError,
    Task,
    builtin_datasets,
    read_task_file,
)

ROWS = [
    {"task_id": "t0", "question": "What is 2+2?", "ground_truth": "4", "data_source": "toy", "metadata": {}},
    {
        "task_id": "t1",
        "question": "List the primes below 6.",
        "ground_truth": [2, 3, 5],
        "data_source": "toy",
        "metadata": {"difficulty": "easy", "tags": ["math", "ünïcode ✓"], "nested": {"a": None, "b": 1.5}},
    },
    {
        "task_id": "t2",
        "question": "Write f.",
        "data_source": "toy",
        "ground_truth": {
            "tests": [{"type": "call", "args": [1], "kwargs": {}, "expected": True}],
            "entry_point": "f",
        },
        "metadata": {"choices": ["x", "y"]},
    },
    # A string that looks like JSON stays a string; non-string scalars keep their type.
    {"task_id": "t3", "question": "q", "ground_truth": "[1, 2]", "data_source": "toy", "metadata": {}},
    {"task_id": "t4", "question": "q", "ground_truth": 7, "data_source": "toy", "metadata": {}},
    {"task_id": "t5", "question": "q", "ground_truth": None, "data_source": "toy", "metadata": {}},
    {"task_id": "t6", "question": "", "ground_truth": 0.1, "data_source": "toy", "metadata": {"flag": True}},
]


@pytest.fixture
def registry(tmp_path: Path) -> DatasetRegistry:
    return DatasetRegistry(tmp_path / "datasets")


def test_rows_round_trip_exactly(registry: DatasetRegistry) -> None:
    registry.register("toy", ROWS, "train", reward="exact_match", description="a toy", source="tests")
    loaded = registry.load("toy", "train")
    assert loaded == ROWS
    assert [type(r["ground_truth"]) for r in loaded] == [type(r["ground_truth"]) for r in ROWS]
    # The parquet layout is the documented one: strings as is, anything else JSON with a flag.
    table = pq.read_table(registry.root / "toy" / "train.parquet")
    assert table.column_names == [
        "task_id",
        "question",
        "ground_truth",
        "ground_truth_is_json",
        "data_source",
        "metadata",
    ]
    assert table.column("ground_truth").to_pylist()[:2] == ["4", "[2, 3, 5]"]
    assert table.column("ground_truth_is_json").to_pylist()[:4] == [False, True, True, False]


def test_manifest_and_info(registry: DatasetRegistry) -> None:
    registry.register("toy", ROWS, "train", reward="exact_match", description="a toy", source="tests")
    registry.register("toy", ROWS[:2], "test")
    manifest = json.loads((registry.root / "toy" / "dataset.json").read_text())
    assert manifest["splits"] == {
        "train": {"rows": 7, "file": "train.parquet"},
        "test": {"rows": 2, "file": "test.parquet"},
    }
    assert (manifest["reward"], manifest["description"], manifest["source"]) == (
        "exact_match",
        "a toy",
        "tests",
    )
    assert manifest["created"] and manifest["updated"]
    info = registry.info("toy")
    assert (info.kind, info.splits, info.reward, info.path) == (
        "local",
        {"train": 7, "test": 2},
        "exact_match",
        registry.root / "toy",
    )
    # Registering a split again replaces that split only.
    registry.register("toy", ROWS[:3], "train", description="smaller")
    assert registry.info("toy").splits == {"train": 3, "test": 2}
    assert registry.info("toy").reward == "exact_match" and registry.info("toy").description == "smaller"


def test_defaults_filled_and_task_model_accepted(registry: DatasetRegistry) -> None:
    rows = [
        {"task_id": "a", "question": "q", "ground_truth": "1"},
        Task(task_id="b", question="q", ground_truth="2", data_source="src"),
    ]
    registry.register("mine", rows)
    assert registry.load("mine") == [
        {"task_id": "a", "question": "q", "ground_truth": "1", "data_source": "mine", "metadata": {}},
        {"task_id": "b", "question": "q", "ground_truth": "2", "data_source": "src", "metadata": {}},
    ]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"task_id": "x", "ground_truth": "1"}, "row 1: missing field 'question'"),
        (
            {"task_id": "x", "question": 5, "ground_truth": "1"},
            "row 1: field 'question': Input should be a valid string",
        ),
        ({"task_id": 3, "question": "q", "ground_truth": "1"}, "row 1: field 'task_id'"),
        (
            {"task_id": "x", "question": "q", "answer": "1", "ground_truth": "1"},
            "row 1: unexpected field 'answer'",
        ),
        (
            {"task_id": "x", "question": "q", "ground_truth": (1, 2)},
            "row 1 ('x'): field 'ground_truth' must be plain JSON",
        ),
        (
            {"task_id": "x", "question": "q", "ground_truth": float("nan")},
            "field 'ground_truth' must be plain JSON",
        ),
        (
            {"task_id": "x", "question": "q", "ground_truth": "1", "metadata": {1: "a"}},
            "row 1: field 'metadata.1.[key]'",
        ),
        ({"task_id": "x", "question": "q", "ground_truth": "1", "metadata": "{}"}, "row 1: field 'metadata'"),
        (
            {"task_id": "t0", "question": "q", "ground_truth": "1"},
            "row 1: task_id 't0' already used by row 0",
        ),
    ],
)
def test_invalid_rows_are_named(registry: DatasetRegistry, bad: dict, message: str) -> None:
    with pytest.raises(InvalidTaskError, match=re.escape(message)):
        registry.register("bad", [ROWS[0], bad])
    assert not registry.exists("bad")


def test_register_refusals(registry: DatasetRegistry) -> None:
    with pytest.raises(ValueError, match="built-in dataset"):
        registry.register("add", ROWS)
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        registry.register("toy", ROWS, reward="nope")
    with pytest.raises(ValueError, match="not valid"):
        registry.register("../evil", ROWS)
    with pytest.raises(ValueError, match="split name"):
        registry.register("toy", ROWS, "a/b")
    with pytest.raises(ValueError, match="no rows"):
        registry.register("toy", [])
    with pytest.raises(TypeError, match="not a single dict"):
        registry.register("toy", ROWS[0])


def test_load_transform_limit_and_errors(registry: DatasetRegistry) -> None:
    registry.register("toy", ROWS)
    assert [r["task_id"] for r in registry.load("toy", limit=2)] == ["t0", "t1"]
    odd = registry.load(
        "toy", transform=lambda r: None if int(r["task_id"][1]) % 2 else {**r, "question": "!"}
    )
    assert [(r["task_id"], r["question"]) for r in odd] == [
        ("t0", "!"),
        ("t2", "!"),
        ("t4", "!"),
        ("t6", "!"),
    ]
    assert [
        r["task_id"]
        for r in registry.load("toy", transform=lambda r: r if r["task_id"] > "t2" else None, limit=2)
    ] == ["t3", "t4"]
    with pytest.raises(DatasetNotFoundError, match="no split 'test': it has train"):
        registry.load("toy", "test")
    with pytest.raises(DatasetNotFoundError, match="unknown dataset 'nope'"):
        registry.load("nope")
    with pytest.raises(
        DatasetNotFoundError, match="in the catalog but not pulled yet: run `rllm dataset pull gsm8k`"
    ):
        registry.load("gsm8k", "test")


def test_list_exists_remove(registry: DatasetRegistry) -> None:
    registry.register("zeta", ROWS)
    registry.register("alpha", ROWS)
    names = [(info.name, info.kind) for info in registry.list()]
    builtins = sorted(builtin_datasets())
    assert names == [(n, "built-in") for n in builtins] + [("alpha", "local"), ("zeta", "local")]
    assert registry.exists("alpha") and registry.exists("add") and not registry.exists("gsm8k")
    registry.remove("alpha")
    assert not registry.exists("alpha") and not (registry.root / "alpha").exists()
    assert [p.name for p in registry.root.iterdir() if not p.name.startswith(".")] == ["zeta"]
    with pytest.raises(DatasetNotFoundError):
        registry.remove("alpha")
    with pytest.raises(ValueError, match="built-in"):
        registry.remove("add")


def test_failed_write_leaves_previous_split_intact(registry: DatasetRegistry, monkeypatch) -> None:
    registry.register("toy", ROWS[:2])

    def crash(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        registry.register("toy", ROWS)
    assert registry.load("toy") == ROWS[:2]
    assert registry.info("toy").splits == {"train": 2}
    assert sorted(p.name for p in (registry.root / "toy").iterdir()) == [
        ".lock",
        "dataset.json",
        "train.parquet",
    ]


def test_root_defaults(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RLLM_DATASETS_DIR", str(tmp_path / "here"))
    assert DatasetRegistry().root == tmp_path / "here"
    monkeypatch.delenv("RLLM_DATASETS_DIR")
    monkeypatch.setenv("RLLM_CACHE_DIR", str(tmp_path / "cache"))
    assert DatasetRegistry().root == tmp_path / "cache" / "datasets"


# ------------------------------------------------------------------------------------------- built-ins


@pytest.mark.parametrize("name", ["larger", "smaller", "multiply"])
def test_arithmetic_builtins(registry: DatasetRegistry, name: str) -> None:
    info = registry.info(name)
    assert (info.kind, info.reward, info.splits) == ("built-in", "number", {"train": None, "test": None})
    test = registry.load(name, "test", limit=20)
    train = registry.load(name, "train", limit=50)
    assert len(test) == 20 and len(train) == 50
    assert set(test[0]) == set(Task.model_fields) and test[0]["metadata"] == {}
    assert not {r["question"] for r in test} & {r["question"] for r in train}


@pytest.mark.parametrize(("name", "held_out"), [("add", 16), ("count_letter", 15)])
def test_small_arithmetic_builtins_test_split_is_every_held_out_question(
    registry: DatasetRegistry, name: str, held_out: int
) -> None:
    assert registry.info(name).splits == {"train": None, "test": None}  # generated: any size
    assert f"{held_out} held out" in registry.info(name).description
    test = registry.load(name, "test")
    assert len(test) == len({r["question"] for r in test}) == held_out
    train = registry.load(name, "train", limit=500)
    assert len(train) == 500 and not {r["question"] for r in test} & {r["question"] for r in train}


def test_frozenlake_builtin(registry: DatasetRegistry) -> None:
    from rllm.envs.frozenlake import FrozenLakeEnv, shortest_path_length

    rows = registry.load("frozenlake", "test", limit=4)
    assert len(rows) == 4 and registry.info("frozenlake").reward is None
    for row in rows:
        meta = row["metadata"]
        env = FrozenLakeEnv(size=meta["size"], p_frozen=meta["p_frozen"], seed=meta["seed"])
        assert env.grid == meta["grid"] and "\n".join(meta["grid"]) in row["question"]
        assert row["ground_truth"] == meta["shortest_path"] == shortest_path_length(env.grid)


def test_countdown_builtin(registry: DatasetRegistry) -> None:
    from rllm.rewards.countdown import countdown_reward  # written alongside; the built-in needs it

    rows = registry.load("countdown", "test", limit=5)
    assert len(rows) == 5 and registry.info("countdown").reward == "countdown"
    for row in rows:
        assert set(row["ground_truth"]) == {"target", "numbers"}
        assert countdown_reward(row, f"<answer>{row['metadata']['solution']}</answer>").is_correct


def test_code_problems_builtin(registry: DatasetRegistry) -> None:
    info = registry.info("code_problems")
    assert info.splits == {"train": 16, "test": 6} and info.reward == "code"
    rows = registry.load("code_problems", "train") + registry.load("code_problems", "test")
    assert len(rows) == 22 and len({r["task_id"] for r in rows}) == 22
    assert registry.load("code_problems", "test", limit=2) == registry.load("code_problems", "test")[:2]


# ----------------------------------------------------------------------------------------------- files


def _write(path: Path, records: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif path.suffix == ".json":
        path.write_text(json.dumps(records))
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(records), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_register_file_maps_columns(registry: DatasetRegistry, tmp_path: Path, suffix: str) -> None:
    records = [
        {"id": 7, "problem": "1+1?", "solution": "2", "level": 1},
        {"id": 8, "problem": "2+2?", "solution": "4", "level": 2},
    ]
    path = _write(tmp_path / f"data{suffix}", records)
    registry.register_file("mine", path, "test", question_key="problem", answer_key="solution", reward="math")
    assert registry.load("mine", "test") == [
        {
            "task_id": "7",
            "question": "1+1?",
            "ground_truth": "2",
            "data_source": "mine",
            "metadata": {"level": 1},
        },
        {
            "task_id": "8",
            "question": "2+2?",
            "ground_truth": "4",
            "data_source": "mine",
            "metadata": {"level": 2},
        },
    ]
    assert registry.info("mine").source == f"file:{path.resolve()}"


def test_register_csv_defaults(registry: DatasetRegistry, tmp_path: Path) -> None:
    path = tmp_path / "qa.csv"
    path.write_text('question,answer,metadata,source\nWho?,Ada,"{""era"": 1840}",web\nWhen?,1843,,book\n')
    registry.register_file("qa", path, reward="exact_match")
    assert registry.load("qa") == [
        {
            "task_id": "qa-train-0",
            "question": "Who?",
            "ground_truth": "Ada",
            "data_source": "qa",
            "metadata": {"era": 1840, "source": "web"},
        },
        {
            "task_id": "qa-train-1",
            "question": "When?",
            "ground_truth": "1843",
            "data_source": "qa",
            "metadata": {"source": "book"},
        },
    ]


def test_registry_parquet_file_reads_back_exactly(registry: DatasetRegistry, tmp_path: Path) -> None:
    registry.register("toy", ROWS)
    assert read_task_file(registry.root / "toy" / "train.parquet", name="copy") == ROWS


def test_register_file_errors(registry: DatasetRegistry, tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", [{"prompt_text": "q", "label": "a"}])
    with pytest.raises(
        ValueError,
        match=r"no question column \(looked for question, problem, prompt; columns: "
        r"prompt_text, label\): name it with --question-key",
    ):
        registry.register_file("d", path)
    with pytest.raises(ValueError, match="no column 'answer' for the answer"):
        registry.register_file("d", path, question_key="prompt_text", answer_key="answer")
    with pytest.raises(ValueError, match="unsupported file type '.txt'"):
        (tmp_path / "d.txt").write_text("q a\n")
        registry.register_file("d", tmp_path / "d.txt")
    with pytest.raises(FileNotFoundError):
        registry.register_file("d", tmp_path / "missing.jsonl")
    bad = _write(
        tmp_path / "bad.jsonl", [{"question": "q", "answer": (1, 2)}, {"question": 3, "answer": "a"}]
    )
    with pytest.raises(InvalidTaskError, match="row 1: field 'question'"):
        registry.register_file("d", bad)


# --------------------------------------------------------------------------- rows the reward cannot grade

MATH_ROWS = [
    {"task_id": "m0", "question": "1+1?", "ground_truth": "2"},
    {"task_id": "m1", "question": "6*7?", "ground_truth": ["", "42"]},  # the empty entry is skipped
    {"task_id": "m2", "question": "?", "ground_truth": ["", "  "]},  # nothing to grade against
]


def test_registering_a_row_the_reward_cannot_grade_is_refused_in_one_line(registry: DatasetRegistry) -> None:
    with pytest.raises(InvalidTaskError) as info:
        registry.register("mine", MATH_ROWS, "train", reward="math")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "dataset 'mine' split 'train' row 2 (task_id 'm2'): the 'math' reward cannot grade"
    )
    assert "non-empty string, a number, or a list" in message
    assert not registry.exists("mine")  # nothing was written
    registry.register("mine", MATH_ROWS[:2], "train", reward="math")
    assert [r["task_id"] for r in registry.load("mine", "train")] == ["m0", "m1"]
    # A later split of a math dataset is checked against the manifest's reward too.
    with pytest.raises(InvalidTaskError, match="split 'test' row 0 .task_id 'm2'"):
        registry.register("mine", MATH_ROWS[2:], "test")
    # A reward with no ground-truth check accepts any row.
    registry.register("other", MATH_ROWS, "train", reward="exact_match")


def test_loading_a_split_the_reward_cannot_grade_is_refused(registry: DatasetRegistry) -> None:
    # Registered before its dataset named a reward (or before this check existed): refused when loaded.
    registry.register("mine", MATH_ROWS, "train")
    assert len(registry.load("mine", "train")) == 3
    with pytest.raises(
        InvalidTaskError, match="^dataset 'mine' split 'train' row 2 .task_id 'm2'.: the 'math'"
    ):
        registry.load("mine", "train", reward="math")  # what a run that grades with math asks for
    assert len(registry.load("mine", "train", limit=2, reward="math")) == 2  # rows it does not return pass
    registry.register("mine", MATH_ROWS[:1], "test", reward="math")  # the dataset now names math
    with pytest.raises(InvalidTaskError, match="row 2"):
        registry.load("mine", "train")
    # The row index is the row's place in the split, also when a transform drops rows before it.
    with pytest.raises(InvalidTaskError, match="row 2 "):
        registry.load("mine", "train", transform=lambda row: None if row["task_id"] == "m0" else row)


def test_a_registered_reward_brings_its_own_check(registry: DatasetRegistry) -> None:
    from rllm.rewards import registry as rewards
    from rllm.types import Outcome

    def needs_int(task: dict) -> str | None:
        return None if isinstance(task["ground_truth"], int) else "ground_truth must be an integer"

    rewards.register_reward(
        "int_match", lambda task, response: Outcome(reward=0.0, is_correct=False), check=needs_int
    )
    try:
        with pytest.raises(
            InvalidTaskError,
            match="row 0 .task_id 'a'.: the 'int_match' reward cannot grade it: "
            "ground_truth must be an integer",
        ):
            registry.register(
                "ints", [{"task_id": "a", "question": "q", "ground_truth": "1"}], reward="int_match"
            )
        registry.register("ints", [{"task_id": "a", "question": "q", "ground_truth": 1}], reward="int_match")
    finally:
        rewards.unregister_reward("int_match")
