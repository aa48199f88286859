"""The built-in tools: the calculator's arithmetic and refusals, the sandboxed python tool, BM25 search."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from rllm.tools import (
    CalculatorError,
    ToolCall,
    ToolRegistry,
    calculator,
    make_python_tool,
    make_search_tool,
)

# --- calculator -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("6 / 3", "2"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** 10", "1024"),
        ("2 ** -1", "0.5"),
        ("-(3 - 5)", "2"),
        ("+4", "4"),
        ("0.1 + 0.2", "0.3"),
        ("1 / 3", "0.333333333333"),
        ("sqrt(16) + abs(-2.5)", "6.5"),
        ("round(2.567, 2)", "2.57"),
        ("max(1, 7, 3) - min(4, 2)", "5"),
        ("2 * pi", "6.28318530718"),
        ("12345678901234567890 * 10", "123456789012345678900"),
        ("1e20", "1e+20"),
        ("  3  ", "3"),
    ],
)
def test_calculator_results(expression: str, expected: str) -> None:
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "only these functions can be called: abs, round, min, max, sqrt"),
        ("os", "unknown name 'os'"),
        ("(1).real", "Attribute is not allowed"),
        ("().__class__", "Attribute is not allowed"),
        ("9**9**9", "exponent 387420489 is too large"),
        ("10**1000 * 10**1000 * 10**1000 * 10**1000", "result is too large"),
        ("1e308 * 10", "result is too large"),
        ("2.0 ** 1000 ** 1.0 * 1e300", "result is too large"),
        ("1 / 0", "division by zero"),
        ("(-8) ** (1 / 3)", "not a real number"),
        ("sqrt(-1)", "sqrt\\(\\): math domain error"),
        ("'a' * 3", "only numbers are allowed"),
        ("True + 1", "only numbers are allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("[1, 2]", "List is not allowed"),
        ("1 +", "not a valid arithmetic expression"),
        ("round(2.5, ndigits=1)", "takes no keyword arguments"),
        ("1 + " * 200 + "1", "expression is too long"),
        ("(" * 220 + "1" + ")" * 220, "not a valid arithmetic expression"),
    ],
)
def test_calculator_refuses_what_is_not_arithmetic(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=message):
        calculator(expression)


def test_calculator_errors_reach_the_model_as_text() -> None:
    registry = ToolRegistry([calculator])
    call = ToolCall(id="c", name="calculator", arguments='{"expression": "9**9**9"}')
    start = time.perf_counter()
    result = asyncio.run(registry.execute(call))
    assert time.perf_counter() - start < 1.0
    assert result.error == "exception"
    assert result.content.startswith(
        "Error: calculator raised CalculatorError: exponent 387420489 is too large"
    )
    assert calculator.schema()["function"]["parameters"]["required"] == ["expression"]


# --- python -----------------------------------------------------------------------------------------


def _run(code: str, **limits: float) -> str:
    return asyncio.run(make_python_tool(**limits).call({"code": code}))


def test_python_tool_returns_stdout() -> None:
    assert _run("print(6 * 7)\nprint('done')") == "42\ndone"
    assert _run("x = 1") == "(no output)"


def test_python_tool_reports_exceptions_as_text() -> None:
    text = _run("print('before')\n1 / 0")
    assert text.startswith("before\nTraceback (most recent call last):\n")
    assert 'File "main.py", line 2' in text  # no random temporary path in what the model reads
    assert text.endswith("ZeroDivisionError: division by zero\nExit code 1.")


def test_python_tool_kills_an_infinite_loop() -> None:
    start = time.perf_counter()
    text = _run("print('start', flush=True)\nwhile True:\n    pass", timeout_s=1.0)
    assert time.perf_counter() - start < 3.0
    assert text == "start\nTimed out after 1s (the process was killed)."


def test_python_tool_survives_a_memory_bomb() -> None:
    text = _run("x = 'a' * 10**10", memory_mb=256)
    assert "MemoryError" in text
    assert text.endswith("Exit code 1: out of memory (limit 256 MB).")


def test_python_tool_writes_stay_in_a_temporary_directory_that_is_removed() -> None:
    code = (
        "import os\nopen('out.txt', 'w').write('hello')\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))"
    )
    workdir, listing = _run(code).splitlines()
    assert workdir != os.getcwd()
    assert os.path.basename(workdir).startswith("rllm-sandbox-")
    assert listing == "['main.py', 'out.txt']"
    assert not os.path.exists(workdir)
    assert not os.path.exists("out.txt")


def test_python_tool_timeout_leaves_the_registry_margin() -> None:
    python = make_python_tool(timeout_s=2.0)
    assert python.name == "python"
    assert python.timeout_s is not None and python.timeout_s > 2.0  # the sandbox kills first, and says so
    assert list(python.parameters["properties"]) == ["code"]


# --- search -----------------------------------------------------------------------------------------

_DOCUMENTS = [
    {"title": "Paris", "text": "Paris is the capital and largest city of France, on the Seine."},
    {"title": "Berlin", "text": "Berlin is the capital of Germany and its largest city."},
    {"title": "Bananas", "text": "Bananas are elongated, edible fruit, yellow when ripe."},
    {"title": "Seine", "text": "The Seine is a river in northern France that flows through Paris."},
]


def _search(query: str, **kwargs: int) -> str:
    return asyncio.run(make_search_tool(_DOCUMENTS, **kwargs).call({"query": query}))


def test_search_ranks_the_relevant_document_first() -> None:
    text = _search("capital of Germany")
    assert text.startswith("[1] Berlin\nBerlin is the capital of Germany and its largest city.")
    assert (
        _search("yellow fruit", top_k=1)
        == "[1] Bananas\nBananas are elongated, edible fruit, yellow when ripe."
    )


def test_search_returns_at_most_top_k_matching_documents() -> None:
    text = _search("river Seine France", top_k=2)
    assert text.startswith("[1] Seine\n")
    assert "[2] Paris\n" in text and "[3]" not in text
    assert _search("quantum chromodynamics") == "No documents match 'quantum chromodynamics'."
    assert _search("the of and") == "No documents match 'the of and'."  # only stop words


def test_search_over_plain_strings_and_bad_input() -> None:
    search = make_search_tool(["cats purr", "dogs bark loudly"], name="find")
    assert search.name == "find"
    assert asyncio.run(search.call({"query": "which animal barks? dogs"})) == "[1] dogs bark loudly"
    with pytest.raises(TypeError, match=r'documents\[1\] must be a string or a dict with a "text"'):
        make_search_tool(["fine", {"body": "no text key"}])
    with pytest.raises(ValueError, match="at least one document"):
        make_search_tool([])
