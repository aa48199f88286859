"""Small programming problems written for rllm: the built-in ``code_problems`` dataset.

Each problem has a statement, 4-8 unit tests and a reference solution that passes them (the test suite
checks this through ``rllm.rewards.code``). Function problems are graded by calling the function;
program problems by feeding stdin and comparing stdout. The ground truth has the fixed shape of rllm's
code tasks::

    {"tests": [{"type": "call", "args": [...], "kwargs": {...}, "expected": ...}
               | {"type": "stdio", "input": "...", "output": "..."}, ...],
     "entry_point": "function_name" or None}

The split is fixed per problem: the test problems are never trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_REPLY = "Reply with the complete code in a ```python code block."


@dataclass(frozen=True)
class CodeProblem:
    """One problem: ``entry_point`` names the function to write, or is None for a stdin/stdout program."""

    slug: str
    split: str
    statement: str
    entry_point: str | None
    tests: tuple[dict[str, Any], ...]
    solution: str
    difficulty: str = "easy"


def _call(*args: Any, expected: Any, **kwargs: Any) -> dict[str, Any]:
    return {"type": "call", "args": list(args), "kwargs": kwargs, "expected": expected}


def _io(stdin: str, stdout: str) -> dict[str, Any]:
    return {"type": "stdio", "input": stdin, "output": stdout}


PROBLEMS: tuple[CodeProblem, ...] = (
    CodeProblem(
        "reverse_words",
        "train",
        "Write a Python function `reverse_words(s: str) -> str` that returns the words of `s` in reverse order, "
        "separated by single spaces. Words are separated by any amount of whitespace.\n"
        'Example: reverse_words("hello  big world") == "world big hello"',
        "reverse_words",
        (
            _call("hello world", expected="world hello"),
            _call("one", expected="one"),
            _call("", expected=""),
            _call("  a  b   c ", expected="c b a"),
            _call("x\ty\nz", expected="z y x"),
        ),
        "def reverse_words(s):\n    return ' '.join(reversed(s.split()))\n",
    ),
    CodeProblem(
        "is_palindrome",
        "train",
        "Write a Python function `is_palindrome(s: str) -> bool` that tells whether `s` reads the same "
        "backwards, ignoring case and every character that is not a letter or digit.\n"
        'Example: is_palindrome("A man, a plan, a canal: Panama") is True',
        "is_palindrome",
        (
            _call("A man, a plan, a canal: Panama", expected=True),
            _call("race a car", expected=False),
            _call("", expected=True),
            _call("No 'x' in Nixon", expected=True),
            _call("ab", expected=False),
            _call("12321", expected=True),
        ),
        "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
    ),
    CodeProblem(
        "fizzbuzz",
        "train",
        "Write a Python function `fizzbuzz(n: int) -> list[str]` that returns the strings for 1..n: "
        '"Fizz" for multiples of 3, "Buzz" for multiples of 5, "FizzBuzz" for multiples of both, else the number.\n'
        'Example: fizzbuzz(5) == ["1", "2", "Fizz", "4", "Buzz"]',
        "fizzbuzz",
        (
            _call(5, expected=["1", "2", "Fizz", "4", "Buzz"]),
            _call(n=1, expected=["1"]),
            _call(0, expected=[]),
            _call(
                15,
                expected=[
                    "1",
                    "2",
                    "Fizz",
                    "4",
                    "Buzz",
                    "Fizz",
                    "7",
                    "8",
                    "Fizz",
                    "Buzz",
                    "11",
                    "Fizz",
                    "13",
                    "14",
                    "FizzBuzz",
                ],
            ),
        ),
        "def fizzbuzz(n):\n    out = []\n    for i in range(1, n + 1):\n"
        "        s = ('Fizz' if i % 3 == 0 else '') + ('Buzz' if i % 5 == 0 else '')\n"
        "        out.append(s or str(i))\n    return out\n",
    ),
    CodeProblem(
        "second_largest",
        "train",
        "Write a Python function `second_largest(nums: list[int]) -> int | None` that returns the second "
        "largest distinct value in `nums`, or None when there are fewer than two distinct values.\n"
        "Example: second_largest([3, 1, 3, 2]) == 2",
        "second_largest",
        (
            _call([3, 1, 3, 2], expected=2),
            _call([5], expected=None),
            _call([], expected=None),
            _call([7, 7, 7], expected=None),
            _call([-1, -5, -3], expected=-3),
            _call([10, 20], expected=10),
        ),
        "def second_largest(nums):\n    values = sorted(set(nums))\n    return values[-2] if len(values) > 1 else None\n",
    ),
    CodeProblem(
        "run_length_encode",
        "train",
        "Write a Python function `run_length_encode(s: str) -> str` that replaces every run of equal "
        "characters with the character followed by the run's length.\n"
        'Example: run_length_encode("aaabcc") == "a3b1c2"',
        "run_length_encode",
        (
            _call("aaabcc", expected="a3b1c2"),
            _call("", expected=""),
            _call("x", expected="x1"),
            _call("aaaaaaaaaaaa", expected="a12"),
            _call("abab", expected="a1b1a1b1"),
        ),
        "def run_length_encode(s):\n    out, i = [], 0\n    while i < len(s):\n        j = i\n"
        "        while j < len(s) and s[j] == s[i]:\n            j += 1\n        out.append(f'{s[i]}{j - i}')\n"
        "        i = j\n    return ''.join(out)\n",
    ),
    CodeProblem(
        "count_vowels",
        "train",
        "Write a Python function `count_vowels(s: str) -> int` that counts the vowels (a, e, i, o, u, in "
        "either case) in `s`.\n"
        'Example: count_vowels("Hello World") == 3',
        "count_vowels",
        (
            _call("Hello World", expected=3),
            _call("", expected=0),
            _call("rhythm", expected=0),
            _call("AEIOUaeiou", expected=10),
            _call("Programming in Python", expected=5),
        ),
        "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n",
    ),
    CodeProblem(
        "merge_intervals",
        "test",
        "Write a Python function `merge_intervals(intervals: list[list[int]]) -> list[list[int]]` that merges "
        "overlapping closed intervals [start, end] (touching ones too) and returns them sorted by start.\n"
        "Example: merge_intervals([[8, 10], [1, 3], [2, 6]]) == [[1, 6], [8, 10]]",
        "merge_intervals",
        (
            _call([[8, 10], [1, 3], [2, 6]], expected=[[1, 6], [8, 10]]),
            _call([], expected=[]),
            _call([[1, 4], [4, 5]], expected=[[1, 5]]),
            _call([[1, 10], [2, 3], [4, 5]], expected=[[1, 10]]),
            _call([[5, 6], [1, 2]], expected=[[1, 2], [5, 6]]),
            _call([[3, 3]], expected=[[3, 3]]),
        ),
        "def merge_intervals(intervals):\n    merged = []\n    for start, end in sorted(intervals):\n"
        "        if merged and start <= merged[-1][1]:\n            merged[-1][1] = max(merged[-1][1], end)\n"
        "        else:\n            merged.append([start, end])\n    return merged\n",
        "medium",
    ),
    CodeProblem(
        "roman_to_int",
        "test",
        "Write a Python function `roman_to_int(s: str) -> int` that converts a Roman numeral (I, V, X, L, C, "
        "D, M, with subtractive pairs such as IV and CM) to an integer.\n"
        'Example: roman_to_int("MCMXCIV") == 1994',
        "roman_to_int",
        (
            _call("III", expected=3),
            _call("IV", expected=4),
            _call("IX", expected=9),
            _call("LVIII", expected=58),
            _call("MCMXCIV", expected=1994),
            _call("MMMCMXCIX", expected=3999),
        ),
        "def roman_to_int(s):\n    value = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "    total = 0\n    for i, c in enumerate(s):\n"
        "        if i + 1 < len(s) and value[c] < value[s[i + 1]]:\n            total -= value[c]\n"
        "        else:\n            total += value[c]\n    return total\n",
        "medium",
    ),
    CodeProblem(
        "flatten",
        "train",
        "Write a Python function `flatten(nested: list) -> list` that returns the non-list items of an "
        "arbitrarily nested list, in order.\n"
        'Example: flatten([1, [2, [3, "a"]], []]) == [1, 2, 3, "a"]',
        "flatten",
        (
            _call([1, [2, [3, "a"]], []], expected=[1, 2, 3, "a"]),
            _call([], expected=[]),
            _call([[[[5]]]], expected=[5]),
            _call([1, 2, 3], expected=[1, 2, 3]),
            _call([[1, [2]], [[3], 4], None], expected=[1, 2, 3, 4, None]),
        ),
        "def flatten(nested):\n    out = []\n    for item in nested:\n        if isinstance(item, list):\n"
        "            out.extend(flatten(item))\n        else:\n            out.append(item)\n    return out\n",
    ),
    CodeProblem(
        "group_anagrams",
        "train",
        "Write a Python function `group_anagrams(words: list[str]) -> list[list[str]]` that groups words "
        "that are anagrams of each other. Sort the words inside each group, and sort the groups by their "
        "first word.\n"
        'Example: group_anagrams(["eat", "tea", "tan", "ate", "nat", "bat"]) == '
        '[["ate", "eat", "tea"], ["bat"], ["nat", "tan"]]',
        "group_anagrams",
        (
            _call(
                ["eat", "tea", "tan", "ate", "nat", "bat"],
                expected=[["ate", "eat", "tea"], ["bat"], ["nat", "tan"]],
            ),
            _call([], expected=[]),
            _call(["a"], expected=[["a"]]),
            _call(["ab", "ba", "abc", "cab", "b"], expected=[["ab", "ba"], ["abc", "cab"], ["b"]]),
        ),
        "def group_anagrams(words):\n    groups = {}\n    for w in words:\n"
        "        groups.setdefault(''.join(sorted(w)), []).append(w)\n"
        "    return sorted(sorted(g) for g in groups.values())\n",
        "medium",
    ),
    CodeProblem(
        "gcd_list",
        "train",
        "Write a Python function `gcd_list(nums: list[int]) -> int` that returns the greatest common divisor "
        "of the positive integers in `nums` (at least one).\n"
        "Example: gcd_list([12, 18, 24]) == 6",
        "gcd_list",
        (
            _call([12, 18, 24], expected=6),
            _call([7], expected=7),
            _call([5, 7], expected=1),
            _call([100, 75, 50], expected=25),
            _call([36, 36], expected=36),
        ),
        "from math import gcd\nfrom functools import reduce\n\n\ndef gcd_list(nums):\n    return reduce(gcd, nums)\n",
    ),
    CodeProblem(
        "digital_root",
        "train",
        "Write a Python function `digital_root(n: int) -> int` that sums the decimal digits of the "
        "non-negative integer `n` repeatedly until a single digit remains.\n"
        "Example: digital_root(493193) == 2  (4+9+3+1+9+3 = 29, 2+9 = 11, 1+1 = 2)",
        "digital_root",
        (
            _call(493193, expected=2),
            _call(0, expected=0),
            _call(9, expected=9),
            _call(10, expected=1),
            _call(999999999, expected=9),
        ),
        "def digital_root(n):\n    while n >= 10:\n        n = sum(int(d) for d in str(n))\n    return n\n",
    ),
    CodeProblem(
        "balanced_brackets",
        "test",
        "Write a Python function `balanced_brackets(s: str) -> bool` that tells whether the brackets (), [] "
        "and {} in `s` are balanced and properly nested. Other characters are ignored.\n"
        'Example: balanced_brackets("{[a](b)}") is True, balanced_brackets("([)]") is False',
        "balanced_brackets",
        (
            _call("{[a](b)}", expected=True),
            _call("([)]", expected=False),
            _call("", expected=True),
            _call("(((", expected=False),
            _call("())", expected=False),
            _call("x = [1, {2: (3)}]", expected=True),
        ),
        "def balanced_brackets(s):\n    pairs, stack = {')': '(', ']': '[', '}': '{'}, []\n    for c in s:\n"
        "        if c in '([{':\n            stack.append(c)\n        elif c in pairs:\n"
        "            if not stack or stack.pop() != pairs[c]:\n                return False\n    return not stack\n",
    ),
    CodeProblem(
        "two_sum",
        "train",
        "Write a Python function `two_sum(nums: list[int], target: int) -> list[int]` that returns the "
        "indices [i, j], i < j, of the two numbers in `nums` that add up to `target` (there is exactly one "
        "such pair).\n"
        "Example: two_sum([2, 7, 11, 15], 9) == [0, 1]",
        "two_sum",
        (
            _call([2, 7, 11, 15], 9, expected=[0, 1]),
            _call([3, 2, 4], 6, expected=[1, 2]),
            _call([3, 3], 6, expected=[0, 1]),
            _call([-1, -2, -3, -4, -5], -8, expected=[2, 4]),
            _call(nums=[1, 5, 9], target=10, expected=[0, 2]),
        ),
        "def two_sum(nums, target):\n    seen = {}\n    for j, x in enumerate(nums):\n"
        "        if target - x in seen:\n            return [seen[target - x], j]\n        seen[x] = j\n",
    ),
    CodeProblem(
        "sum_numbers",
        "train",
        "Write a Python program that reads an integer n on the first line and n integers separated by "
        "spaces on the second line (empty when n is 0), and prints their sum.\n"
        "Example input:\n3\n1 2 3\nExample output:\n6",
        None,
        (
            _io("3\n1 2 3\n", "6\n"),
            _io("1\n-5\n", "-5\n"),
            _io("0\n\n", "0\n"),
            _io("4\n1000000000 1000000000 1000000000 1000000000\n", "4000000000\n"),
        ),
        "n = int(input())\nnums = list(map(int, input().split())) if n else []\nprint(sum(nums))\n",
    ),
    CodeProblem(
        "most_frequent_word",
        "train",
        "Write a Python program that reads one line of text and prints its most frequent word and how "
        "often it occurs, separated by a space. Words are the maximal runs of letters, compared in lowercase "
        "and printed in lowercase; on a tie print the alphabetically first word.\n"
        "Example input:\nThe cat and the hat.\nExample output:\nthe 2",
        None,
        (
            _io("The cat and the hat.\n", "the 2\n"),
            _io("b a\n", "a 1\n"),
            _io("Go, go, GO!\n", "go 3\n"),
            _io("x y y x z\n", "x 2\n"),
            _io("one\n", "one 1\n"),
        ),
        "import re\nfrom collections import Counter\n\n"
        "counts = Counter(re.findall('[a-z]+', input().lower()))\n"
        "word, count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))\nprint(word, count)\n",
    ),
    CodeProblem(
        "transpose",
        "test",
        "Write a Python program that reads two integers r and c on the first line, then r lines of c "
        "integers, and prints the transposed matrix: c lines of r integers separated by single spaces.\n"
        "Example input:\n2 3\n1 2 3\n4 5 6\nExample output:\n1 4\n2 5\n3 6",
        None,
        (
            _io("2 3\n1 2 3\n4 5 6\n", "1 4\n2 5\n3 6\n"),
            _io("1 1\n7\n", "7\n"),
            _io("1 3\n1 2 3\n", "1\n2\n3\n"),
            _io("3 1\n1\n2\n3\n", "1 2 3\n"),
            _io("2 2\n-1 0\n0 -1\n", "-1 0\n0 -1\n"),
        ),
        "r, c = map(int, input().split())\nrows = [input().split() for _ in range(r)]\n"
        "for j in range(c):\n    print(' '.join(row[j] for row in rows))\n",
        "medium",
    ),
    CodeProblem(
        "primes_up_to",
        "train",
        "Write a Python program that reads an integer n and prints all primes p <= n in increasing order on "
        "one line, separated by spaces (an empty line when there are none).\n"
        "Example input:\n10\nExample output:\n2 3 5 7",
        None,
        (
            _io("10\n", "2 3 5 7\n"),
            _io("1\n", "\n"),
            _io("2\n", "2\n"),
            _io("30\n", "2 3 5 7 11 13 17 19 23 29\n"),
            _io("0\n", "\n"),
        ),
        "n = int(input())\nsieve = [True] * (n + 1)\nprimes = []\nfor i in range(2, n + 1):\n"
        "    if sieve[i]:\n        primes.append(i)\n        for j in range(i * i, n + 1, i):\n"
        "            sieve[j] = False\nprint(' '.join(map(str, primes)))\n",
    ),
    CodeProblem(
        "collatz_steps",
        "test",
        "Write a Python program that reads a positive integer n and prints how many steps the Collatz rule "
        "(n -> n/2 if n is even, else 3n+1) takes to reach 1.\n"
        "Example input:\n6\nExample output:\n8",
        None,
        (_io("6\n", "8\n"), _io("1\n", "0\n"), _io("2\n", "1\n"), _io("27\n", "111\n"), _io("7\n", "16\n")),
        "n = int(input())\nsteps = 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    steps += 1\n"
        "print(steps)\n",
    ),
    CodeProblem(
        "caesar_cipher",
        "test",
        "Write a Python program that reads a shift k (an integer, possibly negative or larger than 26) on "
        "the first line and a line of text on the second, and prints the text with every ASCII letter moved "
        "k places along the alphabet, wrapping around and keeping its case. Other characters are unchanged.\n"
        "Example input:\n3\nHello, World!\nExample output:\nKhoor, Zruog!",
        None,
        (
            _io("3\nHello, World!\n", "Khoor, Zruog!\n"),
            _io("0\nabc\n", "abc\n"),
            _io("-1\nabc\n", "zab\n"),
            _io("27\nxyz XYZ\n", "yza YZA\n"),
            _io("13\nUryyb 123\n", "Hello 123\n"),
        ),
        "k = int(input())\ntext = input()\nout = []\nfor ch in text:\n    if 'a' <= ch <= 'z':\n"
        "        out.append(chr((ord(ch) - 97 + k) % 26 + 97))\n    elif 'A' <= ch <= 'Z':\n"
        "        out.append(chr((ord(ch) - 65 + k) % 26 + 65))\n    else:\n        out.append(ch)\n"
        "print(''.join(out))\n",
    ),
    CodeProblem(
        "max_subarray",
        "train",
        "Write a Python program that reads an integer n and then n integers on the next line, and prints "
        "the largest sum of a non-empty contiguous subarray.\n"
        "Example input:\n9\n-2 1 -3 4 -1 2 1 -5 4\nExample output:\n6",
        None,
        (
            _io("9\n-2 1 -3 4 -1 2 1 -5 4\n", "6\n"),
            _io("1\n-7\n", "-7\n"),
            _io("3\n-3 -1 -2\n", "-1\n"),
            _io("5\n1 2 3 4 5\n", "15\n"),
            _io("4\n5 -10 3 4\n", "7\n"),
        ),
        "input()\nnums = list(map(int, input().split()))\nbest = cur = nums[0]\nfor x in nums[1:]:\n"
        "    cur = max(x, cur + x)\n    best = max(best, cur)\nprint(best)\n",
        "medium",
    ),
    CodeProblem(
        "to_binary",
        "train",
        "Write a Python program that reads non-negative integers, one per line, until the end of input, and "
        "prints each in binary (no prefix, no leading zeros; 0 prints as 0), one per line.\n"
        "Example input:\n5\n0\nExample output:\n101\n0",
        None,
        (
            _io("5\n0\n", "101\n0\n"),
            _io("1\n", "1\n"),
            _io("255\n256\n", "11111111\n100000000\n"),
            _io("2\n3\n4\n", "10\n11\n100\n"),
        ),
        "import sys\n\nfor line in sys.stdin:\n    if line.strip():\n        print(bin(int(line))[2:])\n",
    ),
)


def _question(problem: CodeProblem) -> str:
    return f"{problem.statement}\n\n{_REPLY}"


def code_problem_tasks(split: str) -> list[dict[str, Any]]:
    """The problems of ``split`` ("train" or "test") as task rows in the common schema."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    return [
        {
            "task_id": f"code_problems-{p.slug}",
            "question": _question(p),
            "ground_truth": {"tests": [dict(t) for t in p.tests], "entry_point": p.entry_point},
            "data_source": "builtin/code_problems",
            "metadata": {"difficulty": p.difficulty, "reference_solution": p.solution},
        }
        for p in PROBLEMS
        if p.split == split
    ]
