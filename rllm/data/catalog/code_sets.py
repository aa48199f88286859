"""Row transforms of the catalog's code benchmarks (graded by the ``code`` reward).

The ground truth has rllm's fixed code shape: ``{"tests": [TEST, ...], "entry_point": NAME or None}`` with
TEST one of ``{"type": "stdio", "input", "output"}``, ``{"type": "call", "args", "kwargs", "expected"}`` or
``{"type": "assert", "code"}``.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import zlib
from typing import Any

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


class _NoObjects(pickle.Unpickler):
    """Unpickles plain values only: LiveCodeBench pickles a JSON string, and a hub file must never be able
    to make us import and call arbitrary objects."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from dataset test cases")


# The largest decompressed private-test blob accepted per problem. LiveCodeBench's biggest are tens of MiB;
# a hub file crafted as a compression bomb (a few KiB that inflate to GiBs) stops here instead of exhausting memory.
MAX_DECOMPRESSED_BYTES = 512 * 1024 * 1024
_CHUNK_BYTES = 1024 * 1024


class DecompressedTooLarge(ValueError):
    """A compressed dataset field inflates past the limit (a compression bomb, or a limit set too low)."""


def _bounded_inflate(data: bytes, max_bytes: int, source: str) -> bytes:
    """``zlib.decompress(data)``, refusing to produce more than ``max_bytes``: inflated a chunk at a time,
    so memory never holds more than the limit plus one chunk."""
    inflater = zlib.decompressobj()
    out, pending = bytearray(), data
    while not inflater.eof:
        chunk = inflater.decompress(pending, _CHUNK_BYTES)
        pending = inflater.unconsumed_tail
        if not chunk and not pending and not inflater.eof:
            raise zlib.error(f"{source}: the compressed test cases end before their zlib stream does")
        out += chunk
        if len(out) > max_bytes:
            raise DecompressedTooLarge(
                f"{source}: compressed test cases inflate past {max_bytes} bytes (a compression bomb?); "
                "pass a larger max_decompressed_bytes only for a source you trust"
            )
    return bytes(out)


def decode_lcb_tests(
    value: str | None, *, source: str = "livecodebench", max_decompressed_bytes: int | None = None
) -> list[dict[str, Any]]:
    """LiveCodeBench test cases: a JSON list, or (private tests) base64 of zlib of a pickled JSON string,
    inflated to at most ``max_decompressed_bytes`` (default ``MAX_DECOMPRESSED_BYTES``; beyond it
    ``DecompressedTooLarge`` naming ``source``)."""
    if not value:
        return []
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    limit = MAX_DECOMPRESSED_BYTES if max_decompressed_bytes is None else max_decompressed_bytes
    raw = _bounded_inflate(base64.b64decode(value.encode()), limit, source)
    payload = _NoObjects(io.BytesIO(raw)).load()
    return json.loads(payload) if isinstance(payload, (str, bytes)) else payload


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
