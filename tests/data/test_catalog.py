"""Catalog row transforms on rows written in each hub dataset's real column layout, and ``pull``.

The hub is unreachable here: ``pull`` is exercised with ``datasets.load_dataset`` replaced by an
in-memory ``datasets.Dataset`` of the same rows, from local files, and offline.
"""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rllm.data.catalog import CATALOG, catalog_entry
from rllm.data.catalog.code_sets import DecompressedTooLarge, decode_lcb_tests
from rllm.data.hub import DatasetPullError, pull
from rllm.data.registry import DatasetRegistry
from rllm.rewards.code import acode_reward
from rllm.rewards.registry import reward_names


def convert(name: str, rows: list[dict[str, Any]], split: str = "test") -> list[dict[str, Any]]:
    return catalog_entry(name).to_tasks(rows, split)


def test_every_entry_is_complete() -> None:
    assert set(CATALOG) >= {
        "gsm8k",
        "math500",
        "aime2024",
        "aime2025",
        "amc",
        "countdown-3to4",
        "humaneval",
        "mbpp",
        "livecodebench",
        "hotpotqa",
        "finqa",
        "mmlu-pro",
        "gpqa-diamond",
    }
    for entry in CATALOG.values():
        assert entry.reward in reward_names() and entry.splits and entry.description
        assert "/" in entry.hub_path


# ---------------------------------------------------------------------------------------------- math

GSM8K = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips to her "
        "friends in May. How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
        "altogether in April and May.\n#### 72",
    },
    {
        "question": "A farm has 1,000 hens and buys 250 more. How many hens does it have?",
        "answer": "It has 1,000+250 = <<1000+250=1250>>1,250 hens.\n#### 1,250",
    },
]


def test_gsm8k() -> None:
    tasks = convert("gsm8k", GSM8K, "train")
    assert [t["ground_truth"] for t in tasks] == ["72", "1250"]
    assert tasks[0] == {
        "task_id": "gsm8k-train-0",
        "question": GSM8K[0]["question"],
        "ground_truth": "72",
        "data_source": "gsm8k",
        "metadata": {"solution": GSM8K[0]["answer"]},
    }
    with pytest.raises(ValueError, match=r"gsm8k: cannot convert hub row 0 .*no '####'"):
        convert("gsm8k", [{"question": "q", "answer": "no final line"}])


def test_math500() -> None:
    rows = [
        {
            "problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  Enter your answer "
            "in the form $(r,\\theta),$ where $r > 0$ and $0 \\le \\theta < 2 \\pi.$",
            "solution": "We have that $r = \\sqrt{0^2 + 3^2} = 3.$ ... $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
            "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
            "subject": "Precalculus",
            "level": 2,
            "unique_id": "test/precalculus/807.json",
        },
        {
            "problem": "What is $1+1$?",
            "solution": "$\\boxed{2}$",
            "answer": "2",
            "subject": "Prealgebra",
            "level": 1,
            "unique_id": "test/prealgebra/1.json",
        },
    ]
    tasks = convert("math500", rows)
    assert tasks[0]["task_id"] == "test/precalculus/807.json"
    assert tasks[0]["ground_truth"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert tasks[0]["metadata"] == {"subject": "Precalculus", "level": 2, "solution": rows[0]["solution"]}
    assert tasks[1]["question"] == "What is $1+1$?"


def test_aime_and_amc() -> None:
    aime24 = convert(
        "aime2024",
        [
            {
                "id": 60,
                "problem": "Every morning Aya goes for a $9$-kilometer-long walk ...",
                "solution": "...",
                "answer": "204",
                "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/Problem_1",
                "year": "2024",
            },
            {
                "id": 61,
                "problem": "Let $ABC$ be a triangle ...",
                "solution": "...",
                "answer": "113",
                "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/Problem_10",
                "year": "2024",
            },
        ],
    )
    assert [(t["task_id"], t["ground_truth"]) for t in aime24] == [
        ("aime2024-60", "204"),
        ("aime2024-61", "113"),
    ]
    aime25 = convert(
        "aime2025",
        [
            {
                "problem_idx": 1,
                "problem": "Find the sum of all integer bases $b>9$ for which $17_b$ is a divisor of $97_b$.",
                "answer": 70,
                "problem_type": ["Number Theory"],
            },
            {
                "problem_idx": 2,
                "problem": "On $\\triangle ABC$ ...",
                "answer": 588,
                "problem_type": ["Geometry"],
            },
        ],
    )
    assert [(t["task_id"], t["ground_truth"]) for t in aime25] == [
        ("aime2025-1", "70"),
        ("aime2025-2", "588"),
    ]
    assert aime25[1]["metadata"] == {"problem_type": ["Geometry"]}
    amc = convert(
        "amc",
        [
            {
                "id": 0,
                "problem": "Cities $A$ and $B$ are $45$ miles apart ...",
                "answer": 27.0,
                "url": "https://artofproblemsolving.com/wiki/index.php/2023_AMC_12A_Problems/Problem_1",
            },
            {"id": 1, "problem": "What is half of five?", "answer": 2.5, "url": "https://example.org"},
        ],
    )
    assert [t["ground_truth"] for t in amc] == ["27", "2.5"]


def test_countdown_hub() -> None:
    from rllm.rewards.countdown import countdown_reward

    tasks = convert(
        "countdown-3to4", [{"target": 98, "nums": [44, 19, 35]}, {"target": 64, "nums": [63, 95, 96]}]
    )
    assert [t["ground_truth"] for t in tasks] == [
        {"target": 98, "numbers": [44, 19, 35]},
        {"target": 64, "numbers": [63, 95, 96]},
    ]
    assert "[44, 19, 35]" in tasks[0]["question"] and "98" in tasks[0]["question"]
    assert countdown_reward(tasks[0], "<answer>44 + 19 + 35</answer>").is_correct
    assert countdown_reward(tasks[1], "<answer>96 - 95 + 63</answer>").is_correct
    assert catalog_entry("countdown-3to4").splits == {"train": "train[:-1024]", "test": "train[-1024:]"}


def test_finqa() -> None:
    rows = [
        {
            "id": "finqa0",
            "query": "Please answer the given financial question based on the context.\nContext: "
            "interest rate to a variable interest rate ... | 2008 | 2007 |\nQuestion: what is "
            "the net change in revenue from 2007 to 2008?\nAnswer:",
            "answer": "-94.0",
            "text": "what is the net change in revenue from 2007 to 2008?",
        },
        {
            "id": "finqa1",
            "query": "...\nQuestion: what percentage of total is cash?\nAnswer:",
            "answer": "0.5326",
            "text": "what percentage of total is cash?",
        },
    ]
    tasks = convert("finqa", rows)
    assert [(t["task_id"], t["ground_truth"]) for t in tasks] == [("finqa0", "-94.0"), ("finqa1", "0.5326")]
    assert tasks[0]["question"] == rows[0]["query"] and tasks[0]["metadata"] == {"text": rows[0]["text"]}


# ---------------------------------------------------------------------------------------------- code

HUMANEVAL = {
    "task_id": "HumanEval/0",
    "prompt": "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
    '    """ Check if in given list of numbers, are any two numbers closer to each other than\n'
    "    given threshold.\n    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n"
    '    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n    """\n',
    "canonical_solution": "    for idx, elem in enumerate(numbers):\n        for idx2, elem2 in enumerate(numbers):\n"
    "            if idx != idx2:\n                distance = abs(elem - elem2)\n"
    "                if distance < threshold:\n                    return True\n\n"
    "    return False\n",
    "test": "\n\nMETADATA = {\n    'author': 'jt',\n    'dataset': 'test'\n}\n\n\ndef check(candidate):\n"
    "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True\n"
    "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False\n"
    "    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True\n"
    "    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True\n\n",
    "entry_point": "has_close_elements",
}

MBPP = [
    {
        "task_id": 11,
        "text": "Write a python function to remove first and last occurrence of a given character "
        "from the string.",
        "code": "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n"
        "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n"
        "        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ",
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 99,
        "text": "Write a function to find the area of a circle of radius r.",
        "code": "import math\ndef helper(x):\n    return x * x\n\ndef circle_area(r):\n    return math.pi * helper(r)",
        "test_list": ["assert math.isclose(circle_area(1), math.pi)", "assert circle_area(0) == 0"],
        "test_setup_code": "import math",
        "challenge_test_list": [],
    },
]


def test_humaneval(code_runner: Callable) -> None:
    (task,) = convert("humaneval", [HUMANEVAL])
    truth = task["ground_truth"]
    assert task["task_id"] == "HumanEval/0" and truth["entry_point"] == "has_close_elements"
    assert truth["tests"] == [{"type": "assert", "code": HUMANEVAL["test"] + "\ncheck(has_close_elements)"}]
    assert HUMANEVAL["prompt"] in task["question"] and "```python" in task["question"]
    assert code_runner(task["metadata"]["reference_solution"], truth) == [True]
    assert code_runner(HUMANEVAL["prompt"] + "    return False\n", truth) == [False]


def test_mbpp(code_runner: Callable) -> None:
    first, second = convert("mbpp", MBPP)
    assert first["task_id"] == "mbpp-11" and first["ground_truth"]["entry_point"] == "remove_Occ"
    assert [t["code"] for t in first["ground_truth"]["tests"]] == MBPP[0]["test_list"]
    assert 'assert remove_Occ("hello","l") == "heo"' in first["question"]
    # Setup code goes in front of each assert; the entry point is the function the asserts call.
    assert second["ground_truth"]["entry_point"] == "circle_area"
    assert second["ground_truth"]["tests"][0] == {
        "type": "assert",
        "code": "import math\nassert math.isclose(circle_area(1), math.pi)",
    }
    for task, row in ((first, MBPP[0]), (second, MBPP[1])):
        assert code_runner(row["code"], task["ground_truth"]) == [True] * len(row["test_list"])


def _lcb_private(tests: list[dict[str, str]]) -> str:
    """LiveCodeBench's encoding of private tests: base64 of zlib of a pickled JSON string."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


LCB = [
    {
        "question_title": "A. Short Sort",
        "question_content": "There are three cards with letters a, b, c ...",
        "platform": "codeforces",
        "question_id": "1873A",
        "contest_id": "1873",
        "contest_date": "2023-08-21T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(
            [{"input": "2\nabc\nbca\n", "output": "YES\nNO\n", "testtype": "stdin"}]
        ),
        "private_test_cases": _lcb_private([{"input": "1\nacb\n", "output": "YES\n", "testtype": "stdin"}]),
        "metadata": "{}",
    },
    {
        "question_title": "two-sum",
        "question_content": "Given an array of integers nums and an integer target ...",
        "platform": "leetcode",
        "question_id": "3000",
        "contest_id": "weekly-contest-370",
        "contest_date": "2023-11-05T00:00:00",
        "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
        "difficulty": "medium",
        "public_test_cases": json.dumps(
            [{"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]", "testtype": "functional"}]
        ),
        "private_test_cases": _lcb_private(
            [
                {"input": "[3, 3]\n6", "output": "[0, 1]", "testtype": "functional"},
                {"input": "[1, 2]\n3", "output": "[0, 1]", "testtype": "functional"},
            ]
        ),
        "metadata": json.dumps({"func_name": "twoSum"}),
    },
]


def test_livecodebench() -> None:
    stdin, functional = convert("livecodebench", LCB)
    assert stdin["task_id"] == "livecodebench-1873A"
    assert stdin["ground_truth"] == {
        "entry_point": None,
        "tests": [
            {"type": "stdio", "input": "2\nabc\nbca\n", "output": "YES\nNO\n"},
            {"type": "stdio", "input": "1\nacb\n", "output": "YES\n"},
        ],
    }
    assert "standard input" in stdin["question"]
    assert functional["ground_truth"] == {
        "entry_point": "twoSum",
        "tests": [
            {"type": "call", "args": [[2, 7, 11, 15], 9], "kwargs": {}, "expected": [0, 1]},
            {"type": "call", "args": [[3, 3], 6], "kwargs": {}, "expected": [0, 1]},
            {"type": "call", "args": [[1, 2], 3], "kwargs": {}, "expected": [0, 1]},
        ],
    }
    assert "class Solution:" in functional["question"]
    assert functional["metadata"]["platform"] == "leetcode" and functional["metadata"]["public_tests"] == 1


def test_lcb_private_tests_never_unpickle_objects() -> None:
    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    hostile = base64.b64encode(zlib.compress(pickle.dumps(Boom()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refusing to load builtins.print"):
        decode_lcb_tests(hostile)
    assert decode_lcb_tests("") == [] and decode_lcb_tests('[{"input": "1"}]') == [{"input": "1"}]


def test_lcb_private_tests_refuse_a_compression_bomb() -> None:
    # 64 MiB of zeros compress to about 64 KiB: past a 1 MiB limit, inflating stops at the limit.
    inflater = zlib.compressobj(9)
    bomb = inflater.compress(b"\0" * (64 * 1024 * 1024)) + inflater.flush()
    assert len(bomb) < 100_000
    value = base64.b64encode(bomb).decode()
    with pytest.raises(DecompressedTooLarge, match=r"problem 'X1'.*inflate past 1048576 bytes"):
        decode_lcb_tests(value, source="problem 'X1'", max_decompressed_bytes=1024 * 1024)
    honest = _lcb_private([{"input": "1\n", "output": "2\n", "testtype": "stdin"}] * 1000)
    assert len(decode_lcb_tests(honest, max_decompressed_bytes=1024 * 1024)) == 1000
    with pytest.raises(zlib.error, match="end before"):  # a truncated stream is an error, not a short list
        decode_lcb_tests(base64.b64encode(zlib.compress(b"x" * 1000)[:-8]).decode())


def test_a_bomb_in_a_livecodebench_row_names_the_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rllm.data.catalog._lcb.MAX_DECOMPRESSED_BYTES", 1024 * 1024)
    bomb = base64.b64encode(zlib.compress(b"\0" * (8 * 1024 * 1024), 9)).decode()
    with pytest.raises(ValueError, match=r"hub row 0 .*DecompressedTooLarge: livecodebench problem '1873A'"):
        convert("livecodebench", [{**LCB[0], "private_test_cases": bomb}])


# ------------------------------------------------------------------------------------ qa and choices


def test_hotpotqa() -> None:
    row = {
        "id": "5a7a06935542990198eaf050",
        "question": "Which magazine was started first Arthur's Magazine or First for Women?",
        "answer": "Arthur's Magazine",
        "type": "comparison",
        "level": "medium",
        "supporting_facts": {"title": ["Arthur's Magazine", "First for Women"], "sent_id": [0, 0]},
        "context": {
            "title": ["Radio City (Indian radio station)", "Arthur's Magazine"],
            "sentences": [
                ["Radio City is India's first private FM radio station.", " It was started on 3 July 2001."],
                ["Arthur's Magazine (1844–1846) was an American literary periodical."],
            ],
        },
    }
    (task,) = convert("hotpotqa", [row])
    assert (task["task_id"], task["ground_truth"]) == ("5a7a06935542990198eaf050", "Arthur's Magazine")
    assert task["question"] == (
        "Radio City (Indian radio station): Radio City is India's first private FM radio station. It was started "
        "on 3 July 2001.\n\nArthur's Magazine: Arthur's Magazine (1844–1846) was an American literary periodical."
        "\n\nQuestion: Which magazine was started first Arthur's Magazine or First for Women?"
    )
    assert task["metadata"]["context"] == [
        {
            "title": "Radio City (Indian radio station)",
            "text": "Radio City is India's first private FM radio station. It was started on 3 July 2001.",
        },
        {
            "title": "Arthur's Magazine",
            "text": "Arthur's Magazine (1844–1846) was an American literary periodical.",
        },
    ]
    assert task["metadata"]["supporting_facts"] == [["Arthur's Magazine", 0], ["First for Women", 0]]
    assert (task["metadata"]["type"], task["metadata"]["level"]) == ("comparison", "medium")


def test_mmlu_pro() -> None:
    from rllm.rewards.qa import multiple_choice_reward

    rows = [
        {
            "question_id": 70,
            "question": "Typical advertising regulatory bodies suggest, for example that adverts "
            "must not: encourage _________, cause unnecessary ________ or _____, and "
            "must not cause _______ offence.",
            "options": [
                "Safe practices, Fear, Jealousy, Trivial",
                "Unsafe practices, Distress, Joy, Trivial",
                "Safe practices, Wants, Jealousy, Trivial",
                "Safe practices, Distress, Fear, Trivial",
                "Unsafe practices, Wants, Jealousy, Serious",
                "Safe practices, Distress, Jealousy, Serious",
                "Safe practices, Wants, Fear, Serious",
                "Unsafe practices, Wants, Fear, Trivial",
                "Unsafe practices, Distress, Fear, Serious",
                "Unsafe practices, Fear, Jealousy, Serious",
            ],
            "answer": "I",
            "answer_index": 8,
            "cot_content": "",
            "category": "business",
            "src": "ori_mmlu-business_ethics",
        },
        {
            "question_id": 71,
            "question": "Which is prime?",
            "options": ["4", "N/A", "6", "7", "N/A"],
            "answer": "D",
            "answer_index": 3,
            "cot_content": "",
            "category": "math",
            "src": "stemez-Math",
        },
    ]
    first, second = convert("mmlu-pro", rows)
    assert first["ground_truth"] == "I" and len(first["metadata"]["choices"]) == 10
    assert "\nJ. Unsafe practices, Fear, Jealousy, Serious\n" in first["question"]
    assert first["metadata"]["category"] == "business" and first["task_id"] == "mmlu-pro-70"
    assert second["metadata"]["choices"] == ["4", "6", "7"] and second["ground_truth"] == "C"
    assert multiple_choice_reward(second, "The answer is (C).").is_correct


def _gpqa_row(i: int) -> dict[str, Any]:
    return {
        "Pre-Revision Question": "...",
        "Question": f"Question {i}: which particle mediates the strong force?",
        "Correct Answer": "gluon",
        "Incorrect Answer 1": "photon ",
        "Incorrect Answer 2": "W boson",
        "Incorrect Answer 3": "graviton",
        "Explanation": "QCD.",
        "Record ID": f"rec{i:04d}",
        "High-level domain": "Physics",
        "Subdomain": "High-energy particle physics",
    }


def test_gpqa_shuffles_deterministically() -> None:
    from rllm.rewards.qa import multiple_choice_reward

    tasks = convert("gpqa-diamond", [_gpqa_row(i) for i in range(12)])
    assert tasks == convert("gpqa-diamond", [_gpqa_row(i) for i in range(12)])  # same order on every pull
    for task in tasks:
        choices = task["metadata"]["choices"]
        assert sorted(choices) == ["W boson", "gluon", "graviton", "photon"]
        assert choices["ABCD".index(task["ground_truth"])] == "gluon"
        assert multiple_choice_reward(task, f"Answer: {task['ground_truth']}").is_correct
    assert len({t["ground_truth"] for t in tasks}) > 1  # the correct option is not always in one place
    assert tasks[0]["task_id"] == "gpqa-diamond-rec0000" and tasks[0]["metadata"]["domain"] == "Physics"


# ---------------------------------------------------------------------------------------------- pull


@pytest.fixture
def fake_hub(monkeypatch) -> list[tuple]:
    """``datasets.load_dataset`` serving GSM8K rows from memory; records every call."""
    import datasets

    calls: list[tuple] = []

    def load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return datasets.Dataset.from_list(GSM8K if split == "train" else GSM8K[:1])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_pull_registers_every_split(tmp_path: Path, fake_hub: list) -> None:
    registry = DatasetRegistry(tmp_path)
    info = pull("gsm8k", registry=registry)
    assert fake_hub == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
    assert (info.kind, info.splits, info.reward) == ("local", {"train": 2, "test": 1}, "math")
    assert info.source == "huggingface:openai/gsm8k (main)"
    assert registry.load("gsm8k", "test") == convert("gsm8k", GSM8K[:1])
    pull("gsm8k", registry=registry)  # already pulled: no download
    assert len(fake_hub) == 2
    pull("gsm8k", registry=registry, force=True)
    assert len(fake_hub) == 4


def test_pull_from_local_hub_files(tmp_path: Path) -> None:
    path = tmp_path / "test-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(MBPP), path)
    registry = DatasetRegistry(tmp_path / "datasets")
    info = pull("mbpp", registry=registry, files={"test": path})
    assert info.splits == {"test": 2}
    assert registry.load("mbpp", "test") == convert("mbpp", MBPP)
    with pytest.raises(ValueError, match="mbpp has splits train, validation, test, not dev"):
        pull("mbpp", registry=registry, files={"dev": path})


def test_pull_offline_says_what_to_do(tmp_path: Path, monkeypatch) -> None:
    import datasets

    def offline(path, name=None, split=None, **kwargs):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    registry = DatasetRegistry(tmp_path)
    with pytest.raises(DatasetPullError) as caught:
        pull("gpqa-diamond", registry=registry)
    message = str(caught.value)
    assert (
        "could not load huggingface:Idavidrein/gpqa (gpqa_diamond) split 'train' for gpqa-diamond/test"
        in message
    )
    assert "the Hugging Face hub is unreachable" in message and "OfflineModeIsEnabled" in message
    assert "Gated on the hub" in message
    assert "rllm dataset pull gpqa-diamond --file test=PATH" in message
    assert "rllm dataset register gpqa-diamond FILE --split test" in message
    assert not registry.exists("gpqa-diamond")


def test_pull_registers_nothing_when_a_split_fails(tmp_path: Path, monkeypatch) -> None:
    import datasets

    def flaky(path, name=None, split=None, **kwargs):
        if split == "test":
            raise RuntimeError("server error")
        return datasets.Dataset.from_list(GSM8K)

    monkeypatch.setattr(datasets, "load_dataset", flaky)
    registry = DatasetRegistry(tmp_path)
    with pytest.raises(DatasetPullError, match="the hub did not serve it"):
        pull("gsm8k", registry=registry)
    assert not registry.exists("gsm8k")
    with pytest.raises(KeyError, match="not in the catalog"):
        pull("nope", registry=registry)


def test_code_rows_pass_the_code_reward() -> None:
    """HumanEval, MBPP and LiveCodeBench rows, as converted, are graded right by the ``code`` reward."""
    (humaneval,) = convert("humaneval", [HUMANEVAL])
    mbpp = convert("mbpp", MBPP)
    stdin, functional = convert("livecodebench", LCB)
    short_sort = (
        "for _ in range(int(input())):\n    s = input()\n"
        "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) in (0, 2) else 'NO')\n"
    )
    two_sum = (
        "from typing import List\n\nclass Solution:\n"
        "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        seen = {}\n"
        "        for j, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], j]\n            seen[x] = j\n"
    )
    cases = [
        (humaneval, humaneval["metadata"]["reference_solution"], True),
        (humaneval, HUMANEVAL["prompt"] + "    return False\n", False),
        *[(task, row["code"], True) for task, row in zip(mbpp, MBPP)],
        (stdin, short_sort, True),
        (stdin, "print('YES')\nprint('YES')\n", False),
        (functional, two_sum, True),
    ]

    async def grade_all() -> list:
        return await asyncio.gather(
            *(acode_reward(task, f"```python\n{program}```") for task, program, _ in cases)
        )

    for (task, _, correct), result in zip(cases, asyncio.run(grade_all())):
        assert result.is_correct == correct, (task["task_id"], result.info)
