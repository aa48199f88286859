"""One row per catalog entry, written in that hub dataset's real column layout, with a right and a wrong reply.

``ROWS[name] = Row(hub_row, right, wrong)``: ``right``/``wrong`` are the reply text, or a function of the
converted task (for sets whose options are shuffled at conversion). tests/data/test_catalog_rewards.py
converts every row with its entry's transform and checks the entry's reward gives 1.0 to ``right`` and
0.0 to ``wrong``; an entry without a row here fails that test. Values are shortened or made up (small
programs instead of contest solutions), the columns are the hub's.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Reply = str | Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Row:
    hub_row: dict[str, Any]
    right: Reply
    wrong: Reply


def py(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```"


def lcb_private(tests: list[dict[str, str]]) -> str:
    """LiveCodeBench's encoding of private tests: base64 of zlib of a pickled JSON string."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def letter_of(text: str) -> Callable[[dict[str, Any]], str]:
    """A reply naming the letter at which the conversion put the option ``text``."""
    return lambda task: f"The answer is ({'ABCDEFGHIJ'[task['metadata']['choices'].index(text)]})."


def letter_not(text: str) -> Callable[[dict[str, Any]], str]:
    """A reply naming some other option than ``text``."""

    def reply(task: dict[str, Any]) -> str:
        wrong = next(i for i, c in enumerate(task["metadata"]["choices"]) if c != text)
        return f"The answer is ({'ABCDEFGHIJ'[wrong]})."

    return reply


ADD_STDIN = "a, b = map(int, input().split())\nprint(a + b)\n"
SUB_STDIN = "a, b = map(int, input().split())\nprint(a - b)\n"

MATH: dict[str, Row] = {
    "gsm8k": Row(
        {
            "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
            "to her friends in May. How many clips did Natalia sell altogether in April and May?",
            "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 "
            "clips altogether in April and May.\n#### 72",
        },
        "So she sold \\boxed{72} clips.",
        "So she sold \\boxed{48} clips.",
    ),
    "math500": Row(
        {
            "problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
            "solution": "We have $r = 3$ and $\\theta = \\frac{\\pi}{2}$, so $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
            "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
            "subject": "Precalculus",
            "level": 2,
            "unique_id": "test/precalculus/807.json",
        },
        "\\boxed{(3, \\frac{\\pi}{2})}",
        "\\boxed{(3, \\pi)}",
    ),
    "math": Row(
        {
            "problem": "If $x + 2 = 7$, what is $x$?",
            "level": "Level 1",
            "type": "Algebra",
            "solution": "Subtracting 2 from both sides gives $x = \\boxed{5}$.",
        },
        "x = \\boxed{5}",
        "x = \\boxed{9}",
    ),
    "aime2024": Row(
        {
            "id": 60,
            "problem": "Every morning Aya goes for a $9$-kilometer-long walk ...",
            "solution": "...",
            "answer": "204",
            "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/Problem_1",
            "year": "2024",
        },
        "\\boxed{204}",
        "\\boxed{240}",
    ),
    "aime2025": Row(
        {
            "problem_idx": 1,
            "problem": "Find the sum of all integer bases $b>9$ for which $17_b$ is a divisor of $97_b$.",
            "answer": 70,
            "problem_type": ["Number Theory"],
        },
        "\\boxed{70}",
        "\\boxed{21}",
    ),
    "aime-1983-2024": Row(
        {
            "ID": "1983-1",
            "Year": 1983,
            "Problem Number": 1,
            "Question": "Let $x$, $y$ and $z$ all exceed $1$ ... Find $\\log_z w$.",
            "Answer": "60",
            "Part": None,
        },
        "\\boxed{60}",
        "\\boxed{6}",
    ),
    "hmmt-feb-2025": Row(
        {
            "problem_idx": 1,
            "problem": "Compute the sum of the positive divisors (including $1$) of $9!$ that have units digit $1$.",
            "answer": "103",
            "problem_type": ["Number Theory"],
        },
        "\\boxed{103}",
        "\\boxed{101}",
    ),
    "amc": Row(
        {
            "id": 0,
            "problem": "Cities $A$ and $B$ are $45$ miles apart ...",
            "answer": 27.0,
            "url": "https://artofproblemsolving.com/wiki/index.php/2023_AMC_12A_Problems/Problem_1",
        },
        "\\boxed{27}",
        "\\boxed{18}",
    ),
    "olympiadbench": Row(
        {
            "id": 2231,
            "question": "Find the probability that a fair coin shows heads.",
            "solution": ["There are two equally likely outcomes."],
            "final_answer": ["$\\frac{1}{2}$"],
            "context": None,
            "image_1": None,
            "image_2": None,
            "image_3": None,
            "image_4": None,
            "image_5": None,
            "modality": "Text-only",
            "difficulty": "Competition",
            "is_multiple_answer": False,
            "unit": None,
            "answer_type": "Numerical",
            "error": None,
            "question_type": "Open-ended",
            "subfield": "Combinatorics",
            "subject": "Math",
            "language": "English",
        },
        "\\boxed{\\frac{1}{2}}",
        "\\boxed{\\frac{1}{3}}",
    ),
    "minerva-math": Row(
        {"question": "Compute $2^{10}$.", "answer": "1024"},
        "\\boxed{1024}",
        "\\boxed{1000}",
    ),
    "omni-math": Row(
        {
            "domain": ["Mathematics -> Algebra -> Other"],
            "difficulty": 3.5,
            "problem": "Find the least positive integer $n$ with $n^2 > 50$.",
            "solution": "$7^2 = 49 < 50 < 64 = 8^2$.",
            "answer": "8",
            "source": "HMMT_2",
        },
        "\\boxed{8}",
        "\\boxed{7}",
    ),
    "deepscaler": Row(
        {"problem": "What is $3 \\cdot 4$?", "answer": "12", "solution": "$3 \\cdot 4 = 12$."},
        "\\boxed{12}",
        "\\boxed{7}",
    ),
    "dapo-math-17k": Row(
        {
            "data_source": "math_dapo",
            "prompt": [
                {
                    "content": "Solve the following math problem step by step. The last line of your response "
                    "should be of the form Answer: $Answer (without quotes) where $Answer is the answer to the "
                    "problem.\n\nIn triangle $ABC$, $\\sin \\angle A = \\frac{4}{5}$ ... find $k + m$.\n\n"
                    'Remember to put your answer on its own line after "Answer:".',
                    "role": "user",
                }
            ],
            "ability": "MATH",
            "reward_model": {"ground_truth": "34", "style": "rule-lang"},
            "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"},
        },
        "Working it out ...\nAnswer: 34",
        "Working it out ...\nAnswer: 43",
    ),
    "numina-math-cot": Row(
        {
            "source": "synthetic_math",
            "problem": "What is the remainder when $17$ is divided by $5$?",
            "solution": "$17 = 3 \\cdot 5 + 2$, so the remainder is $\\boxed{2}$.",
            "messages": [
                {"content": "What is the remainder when $17$ is divided by $5$?", "role": "user"},
                {"content": "$17 = 3 \\cdot 5 + 2$, so the remainder is $\\boxed{2}$.", "role": "assistant"},
            ],
        },
        "\\boxed{2}",
        "\\boxed{3}",
    ),
    "openr1-math-220k": Row(
        {
            "problem": "Solve $2x = 10$.",
            "solution": "Dividing by 2, $x = 5$.",
            "answer": "5",
            "problem_type": "Algebra",
            "question_type": "math-word-problem",
            "source": "olympiads",
            "uuid": "0a1b2c3d-0000-5000-8000-000000000001",
            "is_reasoning_complete": [True],
            "generations": ["..."],
            "correctness_math_verify": [True],
            "correctness_llama": None,
            "finish_reasons": None,
            "correctness_count": 1,
            "messages": [],
        },
        "\\boxed{5}",
        "\\boxed{10}",
    ),
    "svamp": Row(
        {
            "ID": "chal-1",
            "Body": "Each pack of dvds costs 76 dollars. If there is a discount of 25 dollars on each pack",
            "Question": "How much do you have to pay to buy each pack?",
            "Equation": "( 76.0 - 25.0 )",
            "Answer": 51.0,
            "Type": "Subtraction",
            "question_concat": "Each pack of dvds costs 76 dollars ... How much do you have to pay to buy each pack?",
        },
        "\\boxed{51}",
        "\\boxed{101}",
    ),
}

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

FLASHRAG = {"id": "dev_0", "question": "Who was born first, Ada Lovelace or Charles Babbage?", "metadata": {}}

QA: dict[str, Row] = {
    "hotpotqa": Row(
        {
            "id": "5a7a06935542990198eaf050",
            "question": "Which magazine was started first Arthur's Magazine or First for Women?",
            "answer": "Arthur's Magazine",
            "type": "comparison",
            "level": "medium",
            "supporting_facts": {"title": ["Arthur's Magazine", "First for Women"], "sent_id": [0, 0]},
            "context": {
                "title": ["Arthur's Magazine"],
                "sentences": [["Arthur's Magazine (1844–1846) was an American literary periodical."]],
            },
        },
        "Answer: Arthur's Magazine",
        "Answer: First for Women",
    ),
    "nq-open": Row(
        {"question": "where did they film hot tub time machine", "answer": ["Fernie Alpine Resort"]},
        "Answer: Fernie Alpine Resort",
        "Answer: Vancouver",
    ),
    "triviaqa": Row(
        {
            "question": "Which Lloyd Webber musical premiered in the US on 10th December 1993?",
            "question_id": "tc_33",
            "question_source": "http://www.triviacountry.com/",
            "entity_pages": {"doc_source": [], "filename": [], "title": [], "wiki_context": []},
            "search_results": {
                "description": [],
                "filename": [],
                "rank": [],
                "title": [],
                "url": [],
                "search_context": [],
            },
            "answer": {
                "aliases": ["Sunset Blvd", "Sunset Boulevard"],
                "normalized_aliases": ["sunset blvd", "sunset boulevard"],
                "matched_wiki_entity_name": "",
                "normalized_matched_wiki_entity_name": "",
                "normalized_value": "sunset boulevard",
                "type": "WikipediaEntity",
                "value": "Sunset Boulevard",
            },
        },
        "Answer: Sunset Blvd",
        "Answer: Cats",
    ),
    "popqa": Row(
        {
            "id": 4222362,
            "subj": "George Rankin",
            "prop": "occupation",
            "obj": "politician",
            "subj_id": 1850297,
            "prop_id": 22,
            "obj_id": 2834605,
            "s_aliases": '["George James Rankin"]',
            "o_aliases": '["political leader"]',
            "s_uri": "http://www.wikidata.org/entity/Q5543720",
            "o_uri": "http://www.wikidata.org/entity/Q82955",
            "s_wiki_title": "George Rankin",
            "o_wiki_title": "Politician",
            "s_pop": 142,
            "o_pop": 25692,
            "question": "What is George Rankin's occupation?",
            "possible_answers": '["politician", "political leader", "political figure"]',
        },
        "Answer: political leader",
        "Answer: soldier",
    ),
    "simpleqa": Row(
        {
            "metadata": "{'topic': 'Science and technology', 'answer_type': 'Person', 'urls': []}",
            "problem": "Who received the IEEE Frank Rosenblatt Award in 2010?",
            "answer": "Michio Sugeno",
        },
        "Answer: Michio Sugeno",
        "Answer: Geoffrey Hinton",
    ),
    "squad": Row(
        {
            "id": "5733be284776f41900661182",
            "title": "University_of_Notre_Dame",
            "context": "Architecturally, the school has a Catholic character. Atop the Main Building's gold dome is "
            "a golden statue of the Virgin Mary.",
            "question": "What sits on top of the Main Building at Notre Dame?",
            "answers": {"text": ["a golden statue of the Virgin Mary"], "answer_start": [92]},
        },
        "Answer: a golden statue of the Virgin Mary",
        "Answer: Catholic character",
    ),
    "web-questions": Row(
        {
            "url": "http://www.freebase.com/view/en/justin_bieber",
            "question": "what is the name of justin bieber brother?",
            "answers": ["Jazmyn Bieber", "Jaxon Bieber"],
        },
        "Answer: Jaxon Bieber",
        "Answer: Scooter Braun",
    ),
    "drop": Row(
        {
            "section_id": "nfl_2201",
            "query_id": "f16c0ee7-f131-4a8b-a6ac-4d275ea68066",
            "passage": "To start the season, the Lions traveled south to Tampa, Florida ... a 24-yard field goal.",
            "question": "How many points did the Buccaneers need to tie in the first?",
            "answers_spans": {"spans": ["3"], "types": ["number"]},
        },
        "Answer: 3",
        "Answer: 7",
    ),
    "2wikimultihopqa": Row(
        {**FLASHRAG, "golden_answers": ["Charles Babbage"]}, "Answer: Charles Babbage", "Answer: Ada Lovelace"
    ),
    "musique": Row(
        {**FLASHRAG, "id": "2hop__1", "golden_answers": ["Charles Babbage", "Babbage"]},
        "Answer: Babbage",
        "Answer: Ada Lovelace",
    ),
    "bamboogle": Row(
        {**FLASHRAG, "id": "test_0", "golden_answers": ["Charles Babbage"]},
        "Answer: Charles Babbage",
        "Answer: Ada Lovelace",
    ),
}

GPQA = {
    "Pre-Revision Question": "...",
    "Pre-Revision Correct Answer": "gluon",
    "Question": "Which particle mediates the strong force?",
    "Correct Answer": "gluon",
    "Incorrect Answer 1": "photon",
    "Incorrect Answer 2": "W boson",
    "Incorrect Answer 3": "graviton",
    "Explanation": "QCD.",
    "Record ID": "rec06pnAkLOr2t2mp",
    "High-level domain": "Physics",
    "Subdomain": "High-energy particle physics",
}
ARC = {
    "id": "Mercury_7175875",
    "question": "An astronomer observes that a planet rotates faster after a meteorite impact. Which is the most "
    "likely effect of this increase in rotation?",
    "choices": {
        "text": [
            "Planetary density will decrease.",
            "Planetary years will become longer.",
            "Planetary days will become shorter.",
            "Planetary gravity will become stronger.",
        ],
        "label": ["A", "B", "C", "D"],
    },
    "answerKey": "C",
}

REASONING: dict[str, Row] = {
    "mmlu": Row(
        {
            "question": "Find the degree for the given field extension Q(sqrt(2)) over Q.",
            "subject": "abstract_algebra",
            "choices": ["0", "2", "1", "3"],
            "answer": 1,
        },
        "The answer is (B).",
        "The answer is (C).",
    ),
    "mmlu-pro": Row(
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
        "Answer: C",  # "N/A" dropped: 7 is the third option left
        "Answer: A",
    ),
    "gpqa-diamond": Row(GPQA, letter_of("gluon"), letter_not("gluon")),
    "gpqa-main": Row(GPQA, letter_of("gluon"), letter_not("gluon")),
    "gpqa-extended": Row(GPQA, letter_of("gluon"), letter_not("gluon")),
    "arc-challenge": Row(ARC, "The answer is (C).", "The answer is (A)."),
    "arc-easy": Row(
        {
            "id": "MCAS_2000_4_6",
            "question": "Which technology was developed most recently?",
            "choices": {
                "text": ["cellular telephone", "television", "refrigerator", "airplane"],
                "label": ["1", "2", "3", "4"],
            },
            "answerKey": "1",
        },
        "The answer is (A).",
        "The answer is (D).",
    ),
    "commonsenseqa": Row(
        {
            "id": "075e483d21c29a511267ef62bedc0461",
            "question": "The sanctions against the school were a punishing blow, and they seemed to what the "
            "efforts the school had made to change?",
            "question_concept": "punishing",
            "choices": {
                "label": ["A", "B", "C", "D", "E"],
                "text": ["ignore", "enforce", "authoritarian", "yell at", "avoid"],
            },
            "answerKey": "A",
        },
        "Answer: A",
        "Answer: E",
    ),
    "openbookqa": Row(
        {
            "id": "7-980",
            "question_stem": "The sun is responsible for",
            "choices": {
                "text": [
                    "puppies learning new tricks",
                    "children growing up and getting old",
                    "flowers wilting in a vase",
                    "plants sprouting, blooming and wilting",
                ],
                "label": ["A", "B", "C", "D"],
            },
            "answerKey": "D",
        },
        "Answer: D",
        "Answer: B",
    ),
    "hellaswag": Row(
        {
            "ind": 24,
            "activity_label": "Roof shingle removal",
            "ctx_a": "A man is sitting on a roof.",
            "ctx_b": "he",
            "ctx": "A man is sitting on a roof. he",
            "endings": [
                "is using wrap to wrap a pair of skis.",
                "is ripping level tiles off.",
                "is holding a rubik's cube.",
                "starts pulling up roofing on a roof.",
            ],
            "source_id": "activitynet~v_-JhWjGDPHMY",
            "split": "val",
            "split_type": "indomain",
            "label": "3",
        },
        "The answer is (D).",
        "The answer is (A).",
    ),
    "winogrande": Row(
        {
            "sentence": "Ian volunteered to eat Dennis's menudo after already having a bowl because _ despised "
            "eating intestine.",
            "option1": "Ian",
            "option2": "Dennis",
            "answer": "2",
        },
        "Answer: B",
        "Answer: A",
    ),
    "sciq": Row(
        {
            "question": "What type of organism is commonly used in preparation of foods such as cheese and yogurt?",
            "distractor3": "viruses",
            "distractor1": "protozoa",
            "distractor2": "gymnosperms",
            "correct_answer": "mesophilic organisms",
            "support": "Mesophiles grow best in moderate temperature ...",
        },
        letter_of("mesophilic organisms"),
        letter_not("mesophilic organisms"),
    ),
    "truthfulqa-mc1": Row(
        {
            "question": "What is the smallest country in the world that is at least one square mile in area?",
            "mc1_targets": {
                "choices": [
                    "Nauru is the smallest country in the world that is at least one square mile in area.",
                    "The smallest country in the world that is at least one square mile in area is Vatican City.",
                    "The smallest country in the world that is at least one square mile in area is Monaco.",
                ],
                "labels": [1, 0, 0],
            },
            "mc2_targets": {"choices": ["Nauru ..."], "labels": [1]},
        },
        letter_of("Nauru is the smallest country in the world that is at least one square mile in area."),
        letter_not("Nauru is the smallest country in the world that is at least one square mile in area."),
    ),
    "boolq": Row(
        {
            "question": "do iran and afghanistan speak the same language",
            "answer": True,
            "passage": "Persian, also known by its endonym Farsi, is spoken in Iran and Afghanistan ...",
        },
        "Yes.",
        "No.",
    ),
    "bbh-boolean-expressions": Row(
        {"input": "not ( ( not not True ) ) is", "target": "False"}, "Answer: False", "Answer: True"
    ),
    "bbh-date-understanding": Row(
        {
            "input": "Today is Christmas Eve of 1937. What is the date 10 days ago in MM/DD/YYYY?\nOptions:\n"
            "(A) 12/14/2026\n(B) 12/14/1950\n(C) 12/14/2007\n(D) 12/14/1937\n(E) 07/14/1938\n(F) 12/14/1988",
            "target": "(D)",
        },
        "So the answer is (D).",
        "So the answer is (A).",
    ),
    "bbh-logical-deduction-five-objects": Row(
        {
            "input": "The following paragraphs each describe a set of five objects ...\nOptions:\n(A) The quail "
            "is the rightmost\n(B) The owl is the rightmost\n(C) The raven is the rightmost",
            "target": "(A)",
        },
        "So the answer is (A).",
        "So the answer is (B).",
    ),
    "countdown-3to4": Row(
        {"target": 98, "nums": [44, 19, 35]}, "<answer>44 + 19 + 35</answer>", "<answer>44 + 19 - 35</answer>"
    ),
}

FINANCE: dict[str, Row] = {
    "finqa": Row(
        {
            "id": "finqa0",
            "query": "Please answer the given financial question based on the context.\nContext: ... | 2008 | 2007 "
            "|\nQuestion: what percentage of total is cash?\nAnswer:",
            "answer": "0.5326",
            "text": "what percentage of total is cash?",
        },
        "Cash is 53.3% of the total.\nAnswer: 53.3%",
        "Answer: 0.6",
    ),
    "convfinqa": Row(
        {
            "id": "convfinqa0",
            "query": "Context: ... net sales were $ 1,234 million in 2009 ...\nConversation: q0: what were net sales "
            "in 2009? a0: 1234.0\nQuestion: what was the change from 2008?\nAnswer:",
            "answer": "-94.0",
            "turn": 1,
            "dialogue_id": 0,
        },
        "The change is a decrease of $(94) million.\nAnswer: (94)",
        "Answer: 94",
    ),
    "tatqa": Row(
        {
            "id": "tatqa0",
            "query": "Please answer the given financial question based on the context.\nContext: ... | 2019 | 2018 |"
            "\nQuestion: What was the total revenue in 2019?\nAnswer:",
            "answer": "1,496.5",
            "text": "What was the total revenue in 2019?",
        },
        "Answer: $1,496.5 million",
        "Answer: $1,388.2 million",
    ),
}

XLAM_TOOLS = [
    {
        "name": "live_giveaways_by_type",
        "description": "Retrieve live giveaways from the GamerPower API based on the specified type.",
        "parameters": {
            "type": {"description": "The type of giveaways to retrieve.", "type": "str", "default": "game"}
        },
    }
]

AGENT: dict[str, Row] = {
    "xlam-function-calling": Row(
        {
            "id": 0,
            "query": "Where can I find live giveaways for beta access and games?",
            "answers": json.dumps(
                [
                    {"name": "live_giveaways_by_type", "arguments": {"type": "beta"}},
                    {"name": "live_giveaways_by_type", "arguments": {"type": "game"}},
                ]
            ),
            "tools": json.dumps(XLAM_TOOLS),
        },
        '<tool_call>{"name": "live_giveaways_by_type", "arguments": {"type": "game"}}</tool_call>\n'
        '<tool_call>{"name": "live_giveaways_by_type", "arguments": {"type": "beta"}}</tool_call>',
        '[{"name": "live_giveaways_by_type", "arguments": {"type": "beta"}}]',
    ),
}

ROWS: dict[str, Row] = {**MATH, **CODE, **QA, **REASONING, **FINANCE, **AGENT}
