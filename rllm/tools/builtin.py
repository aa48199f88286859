"""Ready-made tools: a safe calculator, a sandboxed Python interpreter, and BM25 search over documents.

``calculator`` is a ``Tool``; the others are built by ``make_python_tool`` and ``make_search_tool``
because they carry settings (limits; the corpus and its index).
"""

from __future__ import annotations

import ast
import math
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rllm.sandbox import arun_python, protections
from rllm.tools.tool import Tool

# --- calculator -------------------------------------------------------------------------------------

_MAX_EXPRESSION_CHARS = 500
_MAX_EXPONENT = 1000
# Integers up to 10,000 bits (about 3,000 digits): far more than arithmetic needs, and well under
# Python's 4,300-digit limit on int -> str.
_MAX_INT_BITS = 10_000
# Integral floats below this print as integers ("2", not "2.0"); above it a float has no exact digits.
_EXACT_FLOAT_LIMIT = 1e15
_SIGNIFICANT_DIGITS = 12

_BINARY_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or its value is out of range; the message says which."""


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Supports numbers, + - * / // % ** (power), parentheses, the functions abs, round, min, max and
    sqrt, and the constants pi and e. Example: "(3 + 4) * 2 ** 3 / sqrt(16)".

    Args:
        expression: The arithmetic expression to evaluate.
    """
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"expression is too long ({len(expression)} characters; at most {_MAX_EXPRESSION_CHARS})"
        )
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as err:
        raise CalculatorError(f"not a valid arithmetic expression ({err.msg})") from None
    return _format_number(_evaluate(tree.body))


calculator = Tool.from_function(calculate, name="calculator")


def _evaluate(node: ast.AST) -> float:
    """The value of one node of the expression's syntax tree; only whitelisted nodes are evaluated."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, got {node.value!r}")
        return _checked(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _checked(_apply(_BINARY_OPS[type(node.op)], left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}; allowed constants are {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise CalculatorError(f"only these functions can be called: {', '.join(_FUNCTIONS)}")
        if node.keywords:
            raise CalculatorError(f"{node.func.id}() takes no keyword arguments")
        args = [_evaluate(arg) for arg in node.args]
        try:
            return _checked(_apply(_FUNCTIONS[node.func.id], *args))
        except ValueError as err:
            raise CalculatorError(f"{node.func.id}(): {err}") from None
    raise CalculatorError(
        f"{type(node).__name__} is not allowed: use numbers, + - * / // % **, parentheses "
        f"and the functions {', '.join(_FUNCTIONS)}"
    )


def _check_power(base: float, exponent: float) -> None:
    """Refuse a power before computing it when it would be huge (``9**9**9`` would take minutes)."""
    if abs(exponent) > _MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} is too large (at most {_MAX_EXPONENT} in absolute value)")
    if isinstance(base, int) and isinstance(exponent, int) and base.bit_length() * exponent > _MAX_INT_BITS:
        raise CalculatorError(f"result of {base} ** {exponent} is too large")


def _apply(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("result is too large") from None
    except (TypeError, ValueError) as err:
        raise CalculatorError(str(err)) from None


def _checked(value: Any) -> float:
    if isinstance(value, complex):
        raise CalculatorError("result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is too large")
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise CalculatorError("result is too large")
    return value


def _format_number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < _EXACT_FLOAT_LIMIT:
        return str(int(value))
    return f"{value:.{_SIGNIFICANT_DIGITS}g}"


# --- python -----------------------------------------------------------------------------------------

# The registry's timeout must not fire before the sandbox's own: it cannot kill the subprocess.
_PYTHON_TOOL_SLACK_S = 5.0


def make_python_tool(
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    *,
    name: str = "python",
    isolation: str = "auto",
    packages: tuple[str, ...] = (),
) -> Tool:
    """A tool that runs a model's Python code in ``rllm.sandbox`` and returns what it printed.

    The result is stdout, then stderr, then a line for a non-zero exit code or a timeout: the model
    reads every failure as text (the process is killed at ``timeout_s``), nothing is raised. The standard
    library is importable, and the top-level ``packages`` named (e.g. ``("numpy",)``; dependencies are not
    followed: name each; see ``rllm.sandbox``); the tool's description tells the model which. Making the
    tool checks the sandbox: without real isolation (``auto`` is bubblewrap) it raises
    ``SandboxUnavailable`` here, before any episode, and ``PackageNotAllowed`` for a package that cannot be
    let in (``rllm``, not installed, an editable install); ``isolation="none"`` runs the code with the
    host's filesystem, knowingly.
    """
    # Blocks once per isolation while it probes; raises if it cannot run or a package is refused.
    protections(isolation, packages=packages)
    available = "Only the standard library is available."
    if packages:
        available = (
            f"The standard library and these packages are available: {', '.join(sorted(set(packages)))}."
        )

    async def python(code: str) -> str:
        """Run a Python script and return its output.

        Args:
            code: The Python code to run.
        """
        result = await arun_python(
            code, timeout_s=timeout_s, memory_mb=memory_mb, isolation=isolation, packages=packages
        )
        parts = [text.rstrip("\n") for text in (result.stdout, result.stderr) if text.strip()]
        if result.timed_out:
            parts.append(f"Timed out after {timeout_s:g}s (the process was killed).")
        elif result.memory_exceeded:
            parts.append(f"Exit code {result.exit_code}: out of memory (limit {memory_mb} MB).")
        elif result.exit_code != 0:
            parts.append(f"Exit code {result.exit_code}.")
        return "\n".join(parts) if parts else "(no output)"

    description = (
        f"Run a Python script and return its output. {available}\n\n"
        "Use print() to see values: the script runs as a file, not in an interactive shell."
    )
    return Tool.from_function(
        python, name=name, description=description, timeout_s=timeout_s + _PYTHON_TOOL_SLACK_S
    )


# --- search -----------------------------------------------------------------------------------------


def make_search_tool(
    documents: Sequence[str] | Sequence[Mapping[str, str]], *, top_k: int = 3, name: str = "search"
) -> Tool:
    """A tool that ranks ``documents`` against a query with BM25 and returns the ``top_k`` best.

    ``documents`` are strings, or dicts with a ``"text"`` and an optional ``"title"``. The index is
    built once, here; documents that share no word with the query (after English stop words) are
    never returned. Needs the ``bm25s`` package.
    """
    try:
        import bm25s
        import numpy as np
    except ImportError:
        raise ImportError("make_search_tool needs bm25s (an rllm dependency): pip install bm25s") from None
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if not documents:
        raise ValueError("make_search_tool needs at least one document")
    titles, texts = [], []
    for i, doc in enumerate(documents):
        if isinstance(doc, str):
            titles.append(None)
            texts.append(doc)
        elif isinstance(doc, Mapping) and isinstance(doc.get("text"), str):
            titles.append(doc.get("title"))
            texts.append(doc["text"])
        else:
            raise TypeError(f'documents[{i}] must be a string or a dict with a "text" string, got {doc!r}')

    tokenizer = bm25s.tokenization.Tokenizer(stopwords="en")
    corpus_ids = tokenizer.tokenize(_titled(titles, texts), show_progress=False, return_as="ids")
    retriever = bm25s.BM25()
    retriever.index(corpus_ids, show_progress=False)
    lock = threading.Lock()  # the tokenizer caches words as it goes; calls arrive from worker threads

    def search(query: str) -> str:
        """Search the document collection and return the most relevant documents.

        Args:
            query: What to look for, in a few keywords.
        """
        with lock:
            query_ids = tokenizer.tokenize([query], update_vocab=False, show_progress=False, return_as="ids")[
                0
            ]
            scores = retriever.get_scores_from_ids(query_ids) if query_ids else None
        if scores is None or scores.max() <= 0:
            return f"No documents match {query!r}."
        ranked = np.argsort(-scores, kind="stable")[:top_k]  # stable: ties keep corpus order
        hits = [int(i) for i in ranked if scores[i] > 0]
        blocks = []
        for n, i in enumerate(hits, start=1):
            header = f"[{n}] {titles[i]}\n" if titles[i] else f"[{n}] "
            blocks.append(header + texts[i])
        return "\n\n".join(blocks)

    return Tool.from_function(search, name=name)


def _titled(titles: Sequence[str | None], texts: Sequence[str]) -> list[str]:
    """What BM25 indexes for each document: its title (when given) and its text."""
    return [f"{title}\n{text}" if title else text for title, text in zip(titles, texts)]
