"""Every published results table says when, at which commit, with which command and on which machine
it was measured (docs/results.md, "How a number is published").

The rule, exactly as this file applies it to README.md, docs/*.md, benchmarks/README.md and
examples/*/README.md:

1. A *table* is a run of lines starting with ``|`` whose second line is a separator (``|---|:--:|``).
   Tables inside fenced code blocks are ignored.
2. A table is a *measurement table* when, with inline code spans removed, a body cell holds a number
   with a unit of measurement (``12 %``, ``4.5 s``, ``0.79 ms``, ``5 min``, ``3.7 GB``, ``620 MB``,
   ``153.6 tok/s``, ``1,608 req/s``, ``0.36x``), or a column whose header names a measured quantity
   (``s/step``, ``tok/s``, ``req/s``, ``RSS``, ``p50``/``p95``/``p99``, ``ms``, ``MB``, ``GB``,
   ``diff``, ``accuracy``, ``wall time``, ``throughput``) holds a number in some body row.
3. A measurement table is exempt only when the nearest non-blank line above it is
   ``<!-- not-a-measurement -->``.
4. Otherwise its *provenance paragraph* must sit directly below it or directly above it: the first
   paragraph found when walking away from the table over blank lines and over tables that follow it
   (or precede it) with only blank lines between them; a heading ends the walk. That paragraph's first
   line starts with ``Measured`` and the paragraph holds
   - a date ``YYYY-MM-DD`` (a real calendar date),
   - a commit: 7-40 hex digits (or the table has a ``commit`` column with one in every body row); in a
     full git checkout every cited token with both a digit and a letter a-f must name a commit of
     this repository, and at least one cited token must (an all-digit or all-letter token may be a
     number or a word, and is ignored unless it names a commit),
   - a command in backticks whose first word (after ``VAR=value`` assignments) is ``rllm``,
     ``python``, ``pytest``, ``bash``, ``/usr/bin/time``, a ``.venv*/bin/`` program or a
     ``benchmarks/``, ``examples/`` or ``scripts/`` path.
5. In docs/results.md every paragraph (outside fenced code blocks) whose first line starts with
   ``Measured``, beside a table or not, names the CPU it ran on (``Intel ...``, ``AMD ...``,
   ``Apple M...``, ``Graviton``, ``Ampere``) or says ``CPU not recorded``: "the reference machine"
   alone does not say which CPU, since its processor model changed between sessions.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from ci_support import skip_or_fail

ROOT = Path(__file__).resolve().parent.parent

SEPARATOR_RE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
CODE_SPAN_RE = re.compile(r"`[^`]*`")
NUMBER = r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"
UNIT_RE = re.compile(NUMBER + r"(?:\s?(?:%|ms|min|s|GB|MB|kB|GiB|MiB|tok/s|req/s)(?![\w/])|x\b)")
HEADER_UNIT_RE = re.compile(
    r"s/step|tok/s|req/s|RSS|\bp(?:50|95|99)\b|\bms\b|\bMB\b|\bGB\b|diff|accuracy|wall time|throughput",
    re.IGNORECASE,
)
DIGIT_RE = re.compile(r"\d")
DATE_RE = re.compile(r"(?<![\d-])(\d{4})-(\d{2})-(\d{2})(?![\d-])")
COMMIT_RE = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")
COMMAND_RE = re.compile(
    r"^(?:\w+=\S+\s+)*(?:rllm|python\d?(?:\.\d+)?|pytest|bash|/usr/bin/time|\.venv[\w-]*/bin/\S+"
    r"|benchmarks/\S+|examples/\S+|scripts/\S+)(?:\s|$)"
)
EXEMPT_MARKER = "<!-- not-a-measurement -->"
CPU_RE = re.compile(r"\b(?:Intel|AMD|Apple M\d+|Graviton\d*|Ampere)\b|CPU not recorded")


@dataclass(frozen=True)
class Table:
    """A markdown table: its line span ``[start, end)`` in the file and its cells."""

    start: int
    end: int
    header: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body.removeprefix("|")
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", body)]


def find_tables(lines: list[str]) -> list[Table]:
    """Every markdown table outside fenced code blocks."""
    tables, i, fenced = [], 0, False
    while i < len(lines):
        if lines[i].lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif (
            not fenced
            and lines[i].lstrip().startswith("|")
            and i + 1 < len(lines)
            and SEPARATOR_RE.match(lines[i + 1])
        ):
            end = i + 2
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            tables.append(Table(i, end, _cells(lines[i]), [_cells(line) for line in lines[i + 2 : end]]))
            i = end
            continue
        i += 1
    return tables


def is_measurement(table: Table) -> bool:
    """Rule 2: a body cell with a number and a unit, or a number under a measured-quantity header."""
    measured_columns = {k for k, head in enumerate(table.header) if HEADER_UNIT_RE.search(head)}
    for row in table.rows:
        for k, cell in enumerate(row):
            text = CODE_SPAN_RE.sub("", cell)
            if UNIT_RE.search(text) or (k in measured_columns and DIGIT_RE.search(text)):
                return True
    return False


def _is_table_line(line: str) -> bool:
    return line.lstrip().startswith("|")


def _paragraph(lines: list[str], index: int, step: int) -> list[str]:
    """The paragraph met walking from ``index`` in direction ``step`` over blank lines and adjacent
    tables; [] at a heading or the file's edge. Returned in reading order."""
    i = index
    while 0 <= i < len(lines) and (not lines[i].strip() or _is_table_line(lines[i])):
        i += step
    if not 0 <= i < len(lines) or lines[i].lstrip().startswith("#"):
        return []
    block = []
    while 0 <= i < len(lines) and lines[i].strip() and not _is_table_line(lines[i]):
        if lines[i].lstrip().startswith("#"):
            break
        block.append(lines[i])
        i += step
    return block if step > 0 else block[::-1]


def _git(root: Path, *args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


@functools.cache
def _git_history_problem(root: Path = ROOT) -> str | None:
    """Why the commits a page cites cannot be resolved in ``root`` (None when they can). A shallow clone (CI
    systems often clone with --depth, and a cited commit is older than that) fetches its missing history
    first, best effort: that needs the remote."""
    try:
        shallow = _git(root, "rev-parse", "--is-shallow-repository")
    except FileNotFoundError:
        return "git is not installed: install it and run the tests in a git clone"
    if shallow.returncode != 0:
        return f"{root} is not a git checkout ({shallow.stderr.strip()}): run the tests in a git clone"
    if shallow.stdout.strip() == "false":
        return None
    try:
        error = _git(root, "fetch", "--quiet", "--unshallow", timeout_s=300).stderr.strip()
    except subprocess.TimeoutExpired:
        error = "timed out after 300 s"
    if _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "false":
        return None
    return (
        f"this clone is shallow and `git fetch --unshallow` did not fetch its history ({error}): "
        "run `git fetch --unshallow` with the remote reachable, or clone without --depth"
    )


def _git_commits_checkable() -> bool:
    return _git_history_problem() is None


def _looks_like_commit(token: str) -> bool:
    return bool(re.search("[a-f]", token) and re.search("[0-9]", token))


def _is_commit(token: str) -> bool:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{token}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return out.returncode == 0


def provenance_problem(paragraph: list[str], table: Table, check_git: bool) -> str | None:
    """Why ``paragraph`` is not a provenance paragraph for ``table`` (None when it is one)."""
    if not paragraph:
        return "no paragraph directly above or below it"
    first = paragraph[0].lstrip(" >*_")
    if not first.startswith("Measured"):
        return f"the paragraph next to it does not start with 'Measured': {first[:60]!r}"
    text = " ".join(paragraph)
    dates = [m for m in DATE_RE.finditer(text) if _valid_date(*m.groups())]
    if not dates:
        return "its provenance has no date YYYY-MM-DD"
    commits = COMMIT_RE.findall(DATE_RE.sub(" ", text))
    commit_column = [k for k, head in enumerate(table.header) if head.strip("* ").lower() == "commit"]
    column_ok = bool(commit_column) and all(
        len(row) > commit_column[0] and COMMIT_RE.search(row[commit_column[0]]) for row in table.rows
    )
    if not commits and not column_ok:
        return "its provenance names no commit (7+ hex digits) and the table has no commit column"
    if check_git and commits:
        bad = [c for c in commits if _looks_like_commit(c) and not _is_commit(c)]
        if bad:
            return f"its provenance cites {bad[0]}, which is not a commit of this repository"
        if not column_ok and not any(_is_commit(c) for c in commits):
            return f"none of {commits} is a commit of this repository"
    spans = [span.strip("` ") for span in CODE_SPAN_RE.findall(text)]
    if not any(COMMAND_RE.match(span) for span in spans):
        return "its provenance has no command in backticks (rllm / python / pytest / bash / ...)"
    return None


def _valid_date(year: str, month: str, day: str) -> bool:
    try:
        dt.date(int(year), int(month), int(day))
    except ValueError:
        return False
    return True


def check_markdown(text: str, check_git: bool = False) -> list[str]:
    """One message per measurement table of ``text`` that lacks its provenance."""
    lines = text.splitlines()
    problems = []
    for table in find_tables(lines):
        if not is_measurement(table):
            continue
        above = table.start - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        if above >= 0 and lines[above].strip() == EXEMPT_MARKER:
            continue
        reasons = [
            provenance_problem(_paragraph(lines, index, step), table, check_git)
            for index, step in ((table.end, 1), (table.start - 1, -1))
        ]
        if all(reasons):
            below, upper = reasons
            problems.append(f"line {table.start + 1}: below: {below}; above: {upper}")
    return problems


def measured_paragraphs(text: str) -> list[tuple[int, list[str]]]:
    """Every paragraph outside fenced code blocks whose first line starts with ``Measured``: its
    1-based line number and its lines."""
    lines = text.splitlines()
    found, fenced, i = [], False, 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif (
            not fenced and line.lstrip(" >*_").startswith("Measured") and (i == 0 or not lines[i - 1].strip())
        ):
            end = i
            while end < len(lines) and lines[end].strip() and not _is_table_line(lines[end]):
                end += 1
            found.append((i + 1, lines[i:end]))
            i = end
            continue
        i += 1
    return found


def cpu_problems(text: str) -> list[str]:
    """Rule 5: one message per ``Measured`` paragraph that names no CPU (and no "CPU not recorded")."""
    return [
        f"line {number}: {paragraph[0].strip()[:70]!r} names no CPU (or 'CPU not recorded')"
        for number, paragraph in measured_paragraphs(text)
        if not CPU_RE.search(" ".join(paragraph))
    ]


def published_files() -> list[Path]:
    """The markdown files that publish measured numbers."""
    files = [ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
    files += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "examples").glob("*/README.md"))
    return [f for f in files if f.exists()]


@pytest.mark.parametrize("path", published_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_results_table_says_when_where_and_how_it_was_measured(path: Path) -> None:
    problems = check_markdown(path.read_text(encoding="utf-8"), check_git=_git_commits_checkable())
    assert not problems, f"{path.relative_to(ROOT)}: a results table lacks its provenance:\n" + "\n".join(
        problems
    )


def test_the_scan_covers_the_results_pages() -> None:
    names = {str(p.relative_to(ROOT)) for p in published_files()}
    assert {"README.md", "docs/results.md", "benchmarks/README.md"} <= names


def test_every_measurement_on_the_results_page_names_its_cpu() -> None:
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert len(measured_paragraphs(text)) >= 10  # the scan finds the page's provenance lines
    problems = cpu_problems(text)
    assert not problems, "docs/results.md: a measurement does not say which CPU it ran on:\n" + "\n".join(
        problems
    )


def test_the_reference_machine_is_defined_once_with_its_spec() -> None:
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    section = text.split("## The reference machine", 1)[1].split("\n## ", 1)[0]
    for needed in ("CPU", "RAM", "torch 2.13.0+cpu", "Python 3.11"):
        assert needed in section, needed


# --- the rule on small synthetic pages, both ways -----------------------------------------------

TABLE = "| batch | rllm tok/s |\n|---|---|\n| 8 | 153.6 |\n"
GOOD = "Measured 2026-11-30 at 4431555 on the reference machine: `python benchmarks/bench_generate.py`."


def test_a_measured_table_without_provenance_fails() -> None:
    assert check_markdown("# Speed\n\n" + TABLE + "\nFast, isn't it?\n")


def test_provenance_directly_below_or_above_passes() -> None:
    assert check_markdown(TABLE + "\n" + GOOD + "\n") == []
    assert check_markdown("## Speed\n\n" + GOOD + "\n\n" + TABLE) == []


def test_provenance_may_wrap_over_several_lines() -> None:
    wrapped = "Measured 2026-11-30 at 4431555 on the reference\nmachine: `rllm train`.\n"
    assert check_markdown(TABLE + "\n" + wrapped) == []


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("Measured at 4431555 on the reference machine: `rllm train`.", "no date"),
        ("Measured 2026-13-45 at 4431555: `rllm train`.", "no date"),
        ("Measured 2026-11-30 on the reference machine: `rllm train`.", "names no commit"),
        ("Measured 2026-11-30 at 4431555 on the reference machine: rllm train.", "no command"),
        ("Measured 2026-11-30 at 4431555: `algorithm.credit=per_state`.", "no command"),
        ("Taken 2026-11-30 at 4431555: `rllm train`.", "does not start with 'Measured'"),
    ],
)
def test_provenance_needs_date_commit_and_command(line: str, reason: str) -> None:
    problems = check_markdown(TABLE + "\n" + line + "\n")
    assert len(problems) == 1 and reason in problems[0], problems


def test_provenance_must_be_next_to_the_table_not_a_paragraph_away() -> None:
    page = GOOD + "\n\nSome other paragraph.\n\n" + TABLE + "\nAnd another one.\n"
    assert check_markdown(page)


def test_a_heading_ends_the_walk() -> None:
    assert check_markdown(GOOD + "\n\n## Another section\n\n" + TABLE)


def test_one_provenance_paragraph_serves_tables_that_follow_each_other() -> None:
    assert check_markdown(TABLE + "\n" + TABLE + "\n" + GOOD + "\n") == []


def test_a_commit_column_stands_in_for_the_commit() -> None:
    table = "| commit | wall time |\n|---|---|\n| 06afe8b | 4 min 49 s |\n| 78698f3 | 7 min 9 s |\n"
    line = "Measured 2026-11-30 at the commit of each row: `rllm train`.\n"
    assert check_markdown(table + "\n" + line) == []
    holed = table + "| (not recorded) | 5 min 8 s |\n"
    assert check_markdown(holed + "\n" + line)


def test_tables_without_measured_numbers_are_not_measurements() -> None:
    config = (
        "| key | default | meaning |\n|---|---|---|\n| `trainer.steps` | `32` | steps; `timeout_s` `5s` |\n"
    )
    assert check_markdown(config) == []
    assert check_markdown("| split | rows |\n|---|---|\n| test | 200 |\n") == []


def test_a_number_under_a_measured_header_is_a_measurement() -> None:
    assert check_markdown("| framework | s/step median |\n|---|---|\n| rllm | 5.88 |\n")
    assert check_markdown("| mode | max abs diff |\n|---|---|\n| raw | 2.3e-5 |\n")


@pytest.mark.parametrize("cell", ["12 %", "4.5 s", "0.79 ms", "5 min", "3.7 GB", "1,608 req/s", "0.36x"])
def test_units_that_make_a_measurement(cell: str) -> None:
    assert check_markdown(f"| what | value |\n|---|---|\n| x | {cell} |\n")


def test_the_marker_exempts_a_table_and_only_the_next_one() -> None:
    page = EXEMPT_MARKER + "\n" + TABLE + "\n"
    assert check_markdown(page) == []
    assert check_markdown(EXEMPT_MARKER + "\n\nA paragraph.\n\n" + TABLE)


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("Measured 2026-11-30 at 4431555 on the reference machine (Intel Xeon): `rllm train`.", True),
        ("Measured 2026-12-02 at 4431555 on an AMD EPYC (Zen 4): `rllm train`.", True),
        ("Measured 2026-12-02 at 4431555 on the reference machine (CPU not recorded): `rllm train`.", True),
        ("Measured 2026-12-02 at 4431555 on the reference\nmachine, CPU not\nrecorded: `rllm train`.", True),
        ("Measured 2026-11-30 at 4431555 on the reference machine: `rllm train`.", False),
        ("> Measured 2026-11-30 at 4431555 on 2 CPU cores: `rllm train`.", False),
    ],
)
def test_a_measurement_must_name_its_cpu(line: str, ok: bool) -> None:
    page = "## Speed\n\n" + TABLE + "\n" + line + "\n"
    assert check_markdown(page) == []  # rule 5 is separate from the table rule
    assert (cpu_problems(page) == []) is ok


def test_cpu_rule_skips_code_fences() -> None:
    bare = "Measured 2026-11-30 at 4431555 on the reference machine: `rllm train`.\n"
    assert cpu_problems("```text\n" + bare + "```\n") == []
    assert len(cpu_problems("## Speed\n\n" + bare)) == 1


def test_tables_in_code_fences_are_ignored() -> None:
    assert check_markdown("```text\n" + TABLE + "```\n") == []


def test_cited_commits_must_exist_in_a_full_checkout() -> None:
    problem = _git_history_problem()
    if problem:
        skip_or_fail(f"cited commits cannot be checked: {problem}")
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert check_markdown(TABLE + f"\nMeasured 2026-11-30 at {head}: `rllm train`.\n", check_git=True) == []
    problems = check_markdown(TABLE + "\nMeasured 2026-11-30 at dead0bee: `rllm train`.\n", check_git=True)
    assert problems and "not a commit" in problems[0]
    problems = check_markdown(TABLE + "\nMeasured 2026-11-30 at 1234567: `rllm train`.\n", check_git=True)
    assert problems and "is a commit of this repository" in problems[0]


def test_a_shallow_clone_fetches_its_history_or_says_how(tmp_path: Path) -> None:
    origin, clone, orphan = tmp_path / "origin", tmp_path / "clone", tmp_path / "orphan"
    run = functools.partial(subprocess.run, capture_output=True, check=True)
    run(["git", "init", "-q", str(origin)])
    commit = ["git", "-C", str(origin), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q"]
    for n in range(3):
        run([*commit, "--allow-empty", "-m", f"c{n}"])
    for path in (clone, orphan):
        run(["git", "clone", "-q", "--depth", "1", f"file://{origin}", str(path)])
    run(["git", "-C", str(orphan), "remote", "remove", "origin"])
    assert _git(clone, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    assert _git_history_problem(clone) is None
    assert _git(clone, "rev-parse", "--verify", "--quiet", "HEAD~2^{commit}").returncode == 0
    problem = _git_history_problem(orphan)
    assert problem and "run `git fetch --unshallow` with the remote reachable" in problem
