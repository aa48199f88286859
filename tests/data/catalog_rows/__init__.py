"""One row per catalog entry, written in that hub dataset's real column layout, with a right and a wrong reply.

``ROWS[name] = Row(hub_row, right, wrong)``: ``right``/``wrong`` are the reply text, or a function of the
converted task (for sets whose options are shuffled at conversion). tests/data/test_catalog_rewards.py
converts every row with its entry's transform and checks the entry's reward gives 1.0 to ``right`` and
0.0 to ``wrong``; an entry without a row here fails that test. Values are shortened or made up (small
programs instead of contest solutions), the columns are the hub's.
"""

from __future__ import annotations

from tests.data.catalog_rows._base import Reply, Row
from tests.data.catalog_rows._code import CODE
from tests.data.catalog_rows._math import MATH
from tests.data.catalog_rows._text import AGENT, FINANCE, QA, REASONING

__all__ = ["ROWS", "Reply", "Row"]

ROWS: dict[str, Row] = {**MATH, **CODE, **QA, **REASONING, **FINANCE, **AGENT}
