"""QA, reasoning, finance and agent entries' rows."""

from __future__ import annotations

import json

from tests.data.catalog_rows._base import Row, letter_not, letter_of

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
