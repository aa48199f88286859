"""Code entries' rows: small programs instead of contest solutions."""

from __future__ import annotations

import json

from tests.data.catalog_rows._base import Row, lcb_private, py

ADD_STDIN = "a, b = map(int, input().split())\nprint(a + b)\n"
SUB_STDIN = "a, b = map(int, input().split())\nprint(a - b)\n"

HUMANEVAL_ROW = {
    "task_id": "HumanEval/2",
    "prompt": 'def truncate_number(number: float) -> float:\n    """ Return the decimal part of number.\n    >>> '
    'truncate_number(3.5)\n    0.5\n    """\n',
    "canonical_solution": "    return number % 1.0\n",
    "test": "\n\nMETADATA = {'author': 'jt', 'dataset': 'test'}\n\n\ndef check(candidate):\n"
    "    assert candidate(3.5) == 0.5\n    assert abs(candidate(1.33) - 0.33) < 1e-6\n",
    "entry_point": "truncate_number",
}
TRUNCATE = "def truncate_number(number: float) -> float:\n    return number % 1.0\n"
WRONG_TRUNCATE = "def truncate_number(number: float) -> float:\n    return 0.0\n"
REMOVE_OCC = (
    "def remove_Occ(s, ch):\n    i = s.find(ch)\n    if i >= 0:\n        s = s[:i] + s[i + 1:]\n"
    "    j = s.rfind(ch)\n    if j >= 0:\n        s = s[:j] + s[j + 1:]\n    return s\n"
)
REMOVE_OCC_TESTS = [
    'assert remove_Occ("hello","l") == "heo"',
    'assert remove_Occ("abcda","a") == "bcd"',
    'assert remove_Occ("PHP","P") == "H"',
]

CODE: dict[str, Row] = {
    "humaneval": Row(HUMANEVAL_ROW, py(TRUNCATE), py(WRONG_TRUNCATE)),
    "humaneval-plus": Row(
        {
            **HUMANEVAL_ROW,
            "test": "\n\ndef check(candidate):\n    inputs = [[3.5], [1.25], [123.0]]\n    results = [0.5, 0.25, 0.0]\n"
            "    for inp, exp in zip(inputs, results):\n        assert abs(candidate(*inp) - exp) <= 1e-6\n",
        },
        py(TRUNCATE),
        py(WRONG_TRUNCATE),
    ),
    "mbpp": Row(
        {
            "task_id": 11,
            "text": "Write a python function to remove first and last occurrence of a given character from the string.",
            "code": REMOVE_OCC,
            "test_list": REMOVE_OCC_TESTS,
            "test_setup_code": "",
            "challenge_test_list": [],
        },
        py(REMOVE_OCC),
        py("def remove_Occ(s, ch):\n    return s\n"),
    ),
    "mbpp-sanitized": Row(
        {
            "source_file": "Benchmark Questions Verification V2.ipynb",
            "task_id": 11,
            "prompt": "Write a python function to remove first and last occurrence of a given character from the string.",
            "code": REMOVE_OCC,
            "test_imports": [],
            "test_list": REMOVE_OCC_TESTS,
        },
        py(REMOVE_OCC),
        py("def remove_Occ(s, ch):\n    return s[::-1]\n"),
    ),
    "mbpp-plus": Row(
        {
            "task_id": 11,
            "code": REMOVE_OCC,
            "prompt": "Write a python function to remove first and last occurrence of a given character from the string.",
            "source_file": "Benchmark Questions Verification V2.ipynb",
            "test_imports": [],
            "test_list": REMOVE_OCC_TESTS,
            "test": "def assertion(out, exp, atol):\n    assert out == exp, f'out: {out}, exp: {exp}'\n\n"
            "inputs = [['hello', 'l'], ['abcda', 'a'], ['PHP', 'P'], ['a', 'a'], ['', 'x']]\n"
            "results = ['heo', 'bcd', 'H', '', '']\n"
            "for i, (inp, exp) in enumerate(zip(inputs, results)):\n    assertion(remove_Occ(*inp), exp, 0)\n",
        },
        py(REMOVE_OCC),
        py("def remove_Occ(s, ch):\n    return s[1:-1]\n"),
    ),
    "livecodebench": Row(
        {
            "question_title": "A. Sum",
            "question_content": "Read two integers and print their sum.",
            "platform": "atcoder",
            "question_id": "abc999_a",
            "contest_id": "abc999",
            "contest_date": "2024-08-03T00:00:00",
            "starter_code": "",
            "difficulty": "easy",
            "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
            "private_test_cases": lcb_private([{"input": "10 -4\n", "output": "6\n", "testtype": "stdin"}]),
            "metadata": "{}",
        },
        py(ADD_STDIN),
        py(SUB_STDIN),
    ),
    "apps": Row(
        {
            "problem_id": 4000,
            "question": "Read two integers a and b and print a + b.",
            "solutions": json.dumps([ADD_STDIN]),
            "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}),
            "difficulty": "introductory",
            "url": "https://codeforces.com/problemset/problem/1/A",
            "starter_code": "",
        },
        py(ADD_STDIN),
        py(SUB_STDIN),
    ),
    "taco": Row(
        {
            "question": "Write a function add(a, b) that returns the sum of a and b.",
            "solutions": json.dumps(["def add(a, b):\n    return a + b\n"]),
            "starter_code": "def add(a, b):\n\t",
            "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [[3], [7]]}),
            "difficulty": "EASY",
            "raw_tags": "['Fundamentals']",
            "name": None,
            "source": "codewars",
            "tags": "['Fundamentals']",
            "skill_types": "[]",
            "url": "https://www.codewars.com/kata/0",
            "Expected Auxiliary Space": None,
            "time_limit": None,
            "date": None,
            "picture_num": None,
            "memory_limit": None,
            "Expected Time Complexity": None,
        },
        py("def add(a, b):\n    return a + b\n"),
        py("def add(a, b):\n    return a * b\n"),
    ),
    "code-contests": Row(
        {
            "name": "1_A. Sum of Two",
            "description": "Given two integers, print their sum.",
            "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
            "private_tests": {"input": ["7 8\n"], "output": ["15\n"]},
            "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]},
            "source": 2,
            "difficulty": 7,
            "solutions": {"language": [2, 3], "solution": ["int main(){}", ADD_STDIN]},
            "incorrect_solutions": {"language": [], "solution": []},
            "cf_contest_id": 1,
            "cf_index": "A",
            "cf_points": 500.0,
            "cf_rating": 800,
            "cf_tags": ["math"],
            "is_description_translated": False,
            "untranslated_description": "",
            "time_limit": {"seconds": 1, "nanos": 0},
            "memory_limit_bytes": 256000000,
            "input_file": "",
            "output_file": "",
        },
        py(ADD_STDIN),
        py(SUB_STDIN),
    ),
    "codeforces": Row(
        {
            "id": "1A",
            "aliases": None,
            "contest_id": "1",
            "contest_name": "Codeforces Beta Round 1",
            "contest_type": "CF",
            "contest_start": 1266580800,
            "contest_start_year": 2010,
            "index": "A",
            "time_limit": 1.0,
            "memory_limit": 256.0,
            "title": "Sum",
            "description": "Print the sum of two integers.",
            "input_format": "One line with two integers a and b.",
            "output_format": "Print a + b.",
            "interaction_format": None,
            "note": None,
            "examples": [{"input": "1 2\n", "output": "3\n"}],
            "editorial": None,
            "rating": 800,
            "tags": ["math"],
            "testset_size": 2,
            "official_tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "-5 5\n", "output": "0\n"}],
            "official_tests_complete": True,
            "input_mode": "stdio",
            "generated_checker": None,
            "executable": True,
        },
        py(ADD_STDIN),
        py(SUB_STDIN),
    ),
    "kodcode": Row(
        {
            "style": "instruct",
            "subset": "Leetcode",
            "question_id": "Leetcode_1_I",
            "question": "Write a function add_numbers(a, b) that returns the sum of two integers.",
            "solution": "def add_numbers(a, b):\n    return a + b\n",
            "test": "from solution import add_numbers\n\ndef test_add_positive():\n    assert add_numbers(2, 3) == 5\n\n"
            "def test_add_zero():\n    assert add_numbers(0, 0) == 0\n",
            "test_info": [
                {
                    "function_name": "add_numbers",
                    "parameter_list": "(a, b)",
                    "function_declaration": "def add_numbers(a, b):",
                    "docstring": "Returns the sum of a and b.",
                }
            ],
            "gpt_pass_sequence": [1, 1, 1],
            "gpt_pass_trial_num": 3,
            "gpt_difficulty": "easy",
            "gpt_pass_percentage": 1.0,
            "trials": {},
            "chosen_trial": "trial_gpt4o_0",
            "metadata": {},
            "benchmark_similarity": 0.5,
            "benchmark_instruction": None,
            "benchmark_task_id": None,
            "filter_reason": None,
        },
        py("def add_numbers(a, b):\n    return a + b\n"),
        py("def add_numbers(a, b):\n    return a - b\n"),
    ),
    "verifiable-coding": Row(
        {
            "source": "codeforces",
            "task_type": "verifiable_code",
            "in_source_id": "1_A",
            "prompt": "Solve the following coding problem using the programming language python:\n\nPrint a + b.",
            "gold_standard_solution": ADD_STDIN,
            "verification_info": json.dumps(
                {
                    "language": "python",
                    "test_cases": [
                        {"fn_name": None, "input": "2 3\n", "output": "5\n", "type": "stdin_stdout"},
                        {"fn_name": None, "input": "10 1\n", "output": "11\n", "type": "stdin_stdout"},
                    ],
                }
            ),
            "metadata": json.dumps({"difficulty": 800}),
            "problem_id": "vfc_1",
        },
        py(ADD_STDIN),
        py(SUB_STDIN),
    ),
}
