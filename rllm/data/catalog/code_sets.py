"""The catalog's code benchmarks (graded by the ``code`` reward): their row transforms and entries.

The ground truth has rllm's fixed code shape: ``{"tests": [TEST, ...], "entry_point": NAME or None}`` with
TEST one of ``{"type": "stdio", "input", "output"}``, ``{"type": "call", "args", "kwargs", "expected"}`` or
``{"type": "assert", "code"}``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rllm.data.catalog._entry import CatalogEntry
from rllm.data.catalog._lcb import MAX_DECOMPRESSED_BYTES, DecompressedTooLarge, decode_lcb_tests

__all__ = ["ENTRIES", "MAX_DECOMPRESSED_BYTES", "DecompressedTooLarge", "decode_lcb_tests"]

REPLY = "Reply with the complete code in a ```python code block."


def humaneval(row: dict[str, Any]) -> dict[str, Any]:
    """openai/openai_humaneval: ``task_id``, ``prompt`` (signature and docstring), ``canonical_solution``
    (the body), ``test`` (defines ``check(candidate)``), ``entry_point``. The test becomes one assert test
    that runs ``check`` on the entry point."""
    entry = row["entry_point"]
    return {
        "task_id": row["task_id"],
        "question": f"Complete the following Python function.\n\n```python\n{row['prompt']}```\n\n{REPLY}",
        "ground_truth": {
            "tests": [{"type": "assert", "code": f"{row['test']}\ncheck({entry})"}],
            "entry_point": entry,
        },
        "metadata": {
            "prompt": row["prompt"],
            "reference_solution": row["prompt"] + row["canonical_solution"],
        },
    }


_DEF = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


def mbpp_sanitized(row: dict[str, Any]) -> dict[str, Any]:
    """google-research-datasets/mbpp (sanitized): ``source_file``, ``task_id``, ``prompt`` (the reworded
    task), ``code``, ``test_imports`` (list), ``test_list``."""
    return mbpp(
        {
            "task_id": row["task_id"],
            "text": row["prompt"],
            "code": row["code"],
            "test_list": row["test_list"],
            "test_setup_code": "\n".join(row.get("test_imports") or []),
        }
    )


def mbpp_plus(row: dict[str, Any]) -> dict[str, Any]:
    """evalplus/mbppplus: ``task_id``, ``code``, ``prompt``, ``source_file``, ``test_imports``, ``test_list``
    (MBPP's asserts, shown in the question) and ``test`` (MBPP+'s many inputs, checked in a loop): the
    ``test`` code, after the imports, is one assert test."""
    asserts = list(row["test_list"])
    imports = "\n".join(row.get("test_imports") or [])
    return {
        "task_id": f"mbpp-plus-{row['task_id']}",
        "question": f"{row['prompt']}\n\nYour code should pass these tests:\n"
        + "\n".join(asserts)
        + f"\n\n{REPLY}",
        "ground_truth": {
            "tests": [{"type": "assert", "code": f"{imports}\n{row['test']}" if imports else row["test"]}],
            "entry_point": _mbpp_entry_point(row["code"], asserts[0]) if asserts else None,
        },
        "metadata": {"reference_solution": row["code"]},
    }


def _mbpp_entry_point(code: str, first_test: str) -> str | None:
    """The reference solution's function that the first test calls (MBPP names no entry point)."""
    for name in _DEF.findall(code):
        if re.search(rf"\b{re.escape(name)}\s*\(", first_test):
            return name
    return None


def mbpp(row: dict[str, Any]) -> dict[str, Any]:
    """google-research-datasets/mbpp (full): ``task_id``, ``text``, ``code``, ``test_list`` (assert
    statements), ``test_setup_code``, ``challenge_test_list``. Each assert is one test (setup code prepended);
    the question shows the asserts, as in the MBPP paper, so the model knows the function's name."""
    asserts = list(row["test_list"])
    setup = (row.get("test_setup_code") or "").strip()
    return {
        "task_id": f"mbpp-{row['task_id']}",
        "question": f"{row['text']}\n\nYour code should pass these tests:\n"
        + "\n".join(asserts)
        + f"\n\n{REPLY}",
        "ground_truth": {
            "tests": [{"type": "assert", "code": f"{setup}\n{test}" if setup else test} for test in asserts],
            "entry_point": _mbpp_entry_point(row["code"], asserts[0]) if asserts else None,
        },
        "metadata": {"reference_solution": row["code"]},
    }


def _lcb_test(case: dict[str, Any]) -> dict[str, Any]:
    if case["testtype"] == "functional":
        # One JSON value per line: the positional arguments of the solution method.
        args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
        return {"type": "call", "args": args, "kwargs": {}, "expected": json.loads(case["output"])}
    return {"type": "stdio", "input": case["input"], "output": case["output"]}


def livecodebench(row: dict[str, Any]) -> dict[str, Any]:
    """lighteval/code_generation_lite: ``question_title``, ``question_content``, ``platform``, ``question_id``,
    ``contest_id``, ``contest_date``, ``starter_code``, ``difficulty``, ``public_test_cases`` (JSON),
    ``private_test_cases`` (compressed, see ``decode_lcb_tests``), ``metadata`` (JSON with ``func_name``
    for LeetCode problems).

    Functional (LeetCode) tests become call tests of ``entry_point``, a method of the starter code's
    ``class Solution``; stdin tests become stdio tests.
    """
    source = f"livecodebench problem {row.get('question_id')!r} (private_test_cases)"
    public = decode_lcb_tests(row["public_test_cases"], source=source)
    private = decode_lcb_tests(row.get("private_test_cases"), source=source)
    func_name = json.loads(row.get("metadata") or "{}").get("func_name")
    starter = (row.get("starter_code") or "").strip()
    if starter:
        how = f"Complete this starter code (your method is called on an instance of `Solution`):\n```python\n{starter}\n```"
    else:
        how = "Read the input from standard input and write the answer to standard output."
    return {
        "task_id": f"livecodebench-{row['question_id']}",
        "question": f"{row['question_content'].strip()}\n\n{how}\n\n{REPLY}",
        "ground_truth": {"tests": [_lcb_test(case) for case in public + private], "entry_point": func_name},
        "metadata": {
            "title": row.get("question_title"),
            "platform": row.get("platform"),
            "contest_id": row.get("contest_id"),
            "contest_date": str(row.get("contest_date")),
            "difficulty": row.get("difficulty"),
            "starter_code": starter,
            "public_tests": len(public),
        },
    }


# ------------------------------------------------------------------------ APPS-style input_output


def _text(value: Any) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def _stdio(inp: Any, out: Any) -> dict[str, Any]:
    """A stdin/stdout test; a list of lines (as APPS sometimes stores them) is joined."""
    return {"type": "stdio", "input": _text(inp), "output": _text(out)}


def apps_tests(value: str | dict[str, Any] | None) -> tuple[list[dict[str, Any]], str | None]:
    """APPS / TACO ``input_output`` (a JSON string ``{"inputs", "outputs", "fn_name"?}``) as rllm tests and
    the entry point. With ``fn_name`` each input is the argument list and each output the expected value;
    a one-element output list is unwrapped, as APPS's checker also accepts it. Without it inputs and
    outputs are stdin/stdout text (lists of lines are joined)."""
    if not value:
        return [], None
    spec = json.loads(value) if isinstance(value, str) else value
    fn_name = spec.get("fn_name")
    pairs = list(zip(spec.get("inputs") or [], spec.get("outputs") or []))
    if not fn_name:
        return [_stdio(inp, out) for inp, out in pairs], None
    tests = []
    for inp, out in pairs:
        expected = out[0] if isinstance(out, list) and len(out) == 1 else out
        args = inp if isinstance(inp, list) else [inp]
        tests.append({"type": "call", "args": args, "kwargs": {}, "expected": expected})
    return tests, fn_name


def _starter_prompt(question: str, starter: str | None) -> str:
    starter = (starter or "").strip()
    if starter:
        how = f"Complete this starter code:\n```python\n{starter}\n```"
    else:
        how = "Read the input from standard input and write the answer to standard output."
    return f"{question.strip()}\n\n{how}\n\n{REPLY}"


def apps(row: dict[str, Any]) -> dict[str, Any] | None:
    """codeparrot/apps: ``problem_id``, ``question``, ``solutions`` (JSON list), ``input_output`` (JSON, see
    ``apps_tests``), ``difficulty``, ``url``, ``starter_code``. Problems without tests are skipped."""
    tests, entry = apps_tests(row.get("input_output"))
    if not tests:
        return None
    solutions = json.loads(row["solutions"]) if row.get("solutions") else []
    return {
        "task_id": f"apps-{row['problem_id']}",
        "question": _starter_prompt(row["question"], row.get("starter_code")),
        "ground_truth": {"tests": tests, "entry_point": entry},
        "metadata": {
            "difficulty": row.get("difficulty"),
            "url": row.get("url"),
            "reference_solution": solutions[0] if solutions else None,
        },
    }


def taco(row: dict[str, Any]) -> dict[str, Any] | None:
    """BAAI/TACO: ``question``, ``solutions`` (JSON list), ``starter_code``, ``input_output`` (APPS's JSON),
    ``difficulty``, ``name``, ``source``, ``tags``, ``skill_types``, ``url``, ``time_limit``, ``memory_limit``
    (and more). Problems without tests are skipped."""
    tests, entry = apps_tests(row.get("input_output"))
    if not tests:
        return None
    solutions = json.loads(row["solutions"]) if row.get("solutions") else []
    return {
        "question": _starter_prompt(row["question"], row.get("starter_code")),
        "ground_truth": {"tests": tests, "entry_point": entry},
        "metadata": {
            "difficulty": row.get("difficulty"),
            "source": row.get("source"),
            "url": row.get("url"),
            "reference_solution": solutions[0] if solutions else None,
        },
    }


def code_contests(row: dict[str, Any]) -> dict[str, Any] | None:
    """deepmind/code_contests: ``name``, ``description``, ``public_tests``, ``private_tests``,
    ``generated_tests`` (each ``{"input": [...], "output": [...]}``), ``source``, ``difficulty``,
    ``solutions`` (``{"language": [...], "solution": [...]}``, language 3 is Python 3), ``cf_rating``,
    ``time_limit`` (and more). Public and private tests are the tests (the generated ones are many and
    machine-made); problems with none are skipped."""
    tests = [
        {"type": "stdio", "input": inp, "output": out}
        for group in ("public_tests", "private_tests")
        for inp, out in zip((row.get(group) or {}).get("input", []), (row.get(group) or {}).get("output", []))
    ]
    if not tests:
        return None
    solutions = row.get("solutions") or {}
    python = [
        code for lang, code in zip(solutions.get("language", []), solutions.get("solution", [])) if lang == 3
    ]
    return {
        "task_id": f"code-contests-{row['name'].split('.')[0]}",
        "question": _starter_prompt(row["description"], None),
        "ground_truth": {"tests": tests, "entry_point": None},
        "metadata": {
            "name": row["name"],
            "difficulty": row.get("difficulty"),
            "cf_rating": row.get("cf_rating"),
            "reference_solution": python[0] if python else None,
        },
    }


def codeforces(row: dict[str, Any]) -> dict[str, Any] | None:
    """open-r1/codeforces (default): ``id``, ``contest_id``, ``index``, ``title``, ``description``,
    ``input_format``, ``output_format``, ``note``, ``examples`` and ``official_tests`` (lists of
    ``{"input", "output"}``), ``rating``, ``tags``, ``time_limit``, ``memory_limit``, ``interaction_format``,
    ``generated_checker`` (and more). Interactive problems and problems whose answers need a checker
    (several right outputs) are skipped: stdout equality cannot grade them."""
    if row.get("interaction_format") or row.get("generated_checker"):
        return None
    cases = list(row.get("official_tests") or []) or list(row.get("examples") or [])
    if not cases:
        return None
    parts = [
        row.get("description"),
        "Input\n" + (row.get("input_format") or ""),
        "Output\n" + (row.get("output_format") or ""),
    ]
    examples = "\n\n".join(
        f"Input:\n{ex['input']}\nOutput:\n{ex['output']}" for ex in row.get("examples") or []
    )
    statement = "\n\n".join(p for p in parts if p) + (f"\n\nExamples\n{examples}" if examples else "")
    return {
        "task_id": f"codeforces-{row['id']}",
        "question": _starter_prompt(f"{row['title']}\n\n{statement}", None),
        "ground_truth": {"tests": [_stdio(c["input"], c["output"]) for c in cases], "entry_point": None},
        "metadata": {
            "rating": row.get("rating"),
            "tags": list(row.get("tags") or []),
            "contest_id": row.get("contest_id"),
        },
    }


_SOLUTION_IMPORT = re.compile(r"^\s*(?:from\s+solution\s+import\s+.*|import\s+solution\b.*)$", re.MULTILINE)
_TEST_FN = re.compile(r"^def\s+(test_\w*)\s*\(\s*\)\s*:", re.MULTILINE)
_TEST_FN_WITH_ARGS = re.compile(r"^def\s+test_\w*\s*\(\s*[^)\s]", re.MULTILINE)


def kodcode(row: dict[str, Any]) -> dict[str, Any] | None:
    """KodCode/KodCode-V1: ``style``, ``subset``, ``question_id``, ``question``, ``solution``, ``test`` (pytest
    code that does ``from solution import f``), ``test_info`` (``function_name``, ``function_declaration``,
    ...), ``gpt_difficulty`` (and more). The test code, without its ``solution`` import, runs as one assert
    test that calls every ``test_*`` function. Tests that need pytest (``pytest.raises``, fixtures) are
    skipped: the sandbox has the standard library only."""
    test = row["test"]
    if "pytest" in test or _TEST_FN_WITH_ARGS.search(test):
        return None
    names = _TEST_FN.findall(test)
    if not names:
        return None
    body = _SOLUTION_IMPORT.sub("", test).strip()
    info = list(row.get("test_info") or [])
    entry = info[0].get("function_name") if info else None
    return {
        "task_id": f"kodcode-{row['question_id']}",
        "question": f"{row['question'].strip()}\n\n{REPLY}",
        "ground_truth": {
            "tests": [{"type": "assert", "code": body + "\n\n" + "\n".join(f"{n}()" for n in names)}],
            "entry_point": entry,
        },
        "metadata": {
            "subset": row.get("subset"),
            "difficulty": row.get("gpt_difficulty"),
            "reference_solution": row.get("solution"),
        },
    }


def verifiable_coding(row: dict[str, Any]) -> dict[str, Any] | None:
    """PrimeIntellect/verifiable-coding-problems: ``source``, ``task_type``, ``in_source_id``, ``prompt`` (the
    problem, with its own instructions), ``gold_standard_solution``, ``verification_info`` (JSON:
    ``{"language", "test_cases": [{"type": "stdin_stdout", "input", "output"}]}``), ``metadata``,
    ``problem_id``. Only Python problems with stdin/stdout tests are kept. open-r1's Python copy
    (``problem_statement``, ``verification_info`` as a struct) converts too."""
    info = row["verification_info"]
    info = json.loads(info) if isinstance(info, str) else info
    cases = info.get("test_cases") or []
    if info.get("language", "python") != "python" or not cases:
        return None
    if any(case.get("type") != "stdin_stdout" for case in cases):
        return None
    return {
        "task_id": f"verifiable-coding-{row['problem_id']}",
        "question": row.get("prompt") or row["problem_statement"],
        "ground_truth": {"tests": [_stdio(c["input"], c["output"]) for c in cases], "entry_point": None},
        "metadata": {"source": row.get("source"), "reference_solution": row.get("gold_standard_solution")},
    }


ENTRIES = (
    CatalogEntry(
        "humaneval",
        "openai/openai_humaneval",
        None,
        {"test": "test"},
        humaneval,
        "code",
        "164 hand-written Python functions with unit tests",
        "One assert test: the test code + `check(ENTRY)`; the reference solution is in metadata.",
        family="code",
        size={"test": 164},
        license="mit",
    ),
    CatalogEntry(
        "humaneval-plus",
        "evalplus/humanevalplus",
        None,
        {"test": "test"},
        humaneval,  # HumanEval's columns, with EvalPlus's stronger check(candidate)
        "code",
        "HumanEval with about 80x more tests per problem (EvalPlus)",
        'Some EvalPlus checks import numpy: grade with `make_code_reward(packages=("numpy",))` for those.',
        family="code",
        size={"test": 164},
        license="apache-2.0",
    ),
    CatalogEntry(
        "mbpp",
        "google-research-datasets/mbpp",
        "full",
        {"train": "train", "validation": "validation", "test": "test"},
        mbpp,
        "code",
        "974 basic Python programming problems with assert tests",
        "One assert test per `test_list` entry (setup code prepended); the question shows the asserts, as "
        "in the MBPP paper.",
        family="code",
        size={"train": 374, "validation": 90, "test": 500},
        license="cc-by-4.0",
    ),
    CatalogEntry(
        "mbpp-sanitized",
        "google-research-datasets/mbpp",
        "sanitized",
        {"train": "train", "validation": "validation", "test": "test"},
        mbpp_sanitized,
        "code",
        "the 427 hand-verified MBPP problems with clearer wording",
        family="code",
        size={"train": 120, "validation": 43, "test": 257},
        license="cc-by-4.0",
    ),
    CatalogEntry(
        "mbpp-plus",
        "evalplus/mbppplus",
        None,
        {"test": "test"},
        mbpp_plus,
        "code",
        "378 MBPP problems with about 35x more tests each (EvalPlus)",
        "MBPP+'s test code imports numpy for float comparison: grade with "
        '`make_code_reward(packages=("numpy",))`.',
        family="code",
        size={"test": 378},
        license="apache-2.0",
    ),
    CatalogEntry(
        "livecodebench",
        "lighteval/code_generation_lite",
        "v6",
        {"test": "test"},
        livecodebench,
        "code",
        "recent contest problems (LeetCode, AtCoder, Codeforces), release v6 problems",
        "The parquet mirror of livecodebench/code_generation_lite (whose loading script recent "
        "`datasets` no longer runs). Stdin tests become stdio tests, functional ones call tests of a "
        "`Solution` method; private tests are decoded at pull time (see below).",
        family="code",
    ),
    CatalogEntry(
        "apps",
        "codeparrot/apps",
        None,
        {"train": "train", "test": "test"},
        apps,
        "code",
        "10k problems from Codeforces, Kattis, LeetCode ... with stdin or call tests (APPS)",
        "The repository was published with a loading script; pulls need its parquet conversion (else pull "
        "from local files). Call-test outputs wrapped in a one-element list are unwrapped.",
        family="code",
        size={"train": 5000, "test": 5000},
        license="mit",
    ),
    CatalogEntry(
        "taco",
        "BAAI/TACO",
        None,
        {"train": "train", "test": "test"},
        taco,
        "code",
        "26k algorithmic problems in APPS's format, tagged by skill (TACO)",
        "Published with a loading script and arrow files; if `datasets` refuses it, pull from local files.",
        family="code",
        size={"train": 25443, "test": 1000},
        license="apache-2.0",
    ),
    CatalogEntry(
        "code-contests",
        "deepmind/code_contests",
        None,
        {"train": "train", "validation": "valid", "test": "test"},
        code_contests,
        "code",
        "competitive programming problems with public and private tests (AlphaCode's CodeContests)",
        "Generated tests are not used (many, machine-made). Train is about 3 GB to download.",
        family="code",
        size={"train": 13328, "validation": 117, "test": 165},
        license="cc-by-4.0",
    ),
    CatalogEntry(
        "codeforces",
        "open-r1/codeforces",
        "default",
        {"train": "train", "test": "test"},
        codeforces,
        "code",
        "Codeforces problems with official tests (Open-R1), checker-graded and interactive ones left out",
        "Problems whose official tests are incomplete on the hub still get the ones it has.",
        family="code",
    ),
    CatalogEntry(
        "kodcode",
        "KodCode/KodCode-V1",
        None,
        {"train": "train"},
        kodcode,
        "code",
        "synthetic Python coding problems with pytest-style unit tests (KodCode-V1)",
        "Tests that need pytest itself (`pytest.raises`, fixtures) are skipped at pull time.",
        family="code",
        license="cc-by-nc-4.0",
    ),
    CatalogEntry(
        "verifiable-coding",
        "PrimeIntellect/verifiable-coding-problems",
        None,
        {"train": "train"},
        verifiable_coding,
        "code",
        "contest problems with stdin/stdout tests and gold solutions (Prime Intellect's SYNTHETIC-1 set)",
        "Only Python problems whose tests are all stdin/stdout are kept. We have not seen this card's "
        "column list (the names are those of open-r1's Python copy, `prompt` for its `problem_statement`).",
        family="code",
    ),
)
