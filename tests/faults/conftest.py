"""The fault scenarios live in benchmarks/_faults.py (bench_faults.py prints them; these tests assert on
them): one implementation, so the suite and the benchmark cannot drift."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
