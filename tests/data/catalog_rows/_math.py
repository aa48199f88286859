"""Math entries' rows."""

from __future__ import annotations

from tests.data.catalog_rows._base import Row

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
