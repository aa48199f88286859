"""What the coordinator knows of its workers: a running success table per (worker role, sub-task kind), and
the rule that picks a worker from it (UCB1 over the running success rate).

The table lives as long as the workflow instance, across episodes and steps, and is shared by every episode
that instance runs, concurrently (a lock guards it: the rollout producer may run episodes on another
thread). ``state_dict`` / ``load_state_dict`` save and restore it as plain JSON.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Record:
    """One worker role's history on one kind of sub-task: ``assigned`` counts sub-tasks handed to it (some
    still running), ``done`` those it finished, ``successes`` those it got right."""

    assigned: int = 0
    done: int = 0
    successes: float = 0.0

    @property
    def rate(self) -> float | None:
        """The running success rate, None before the first finished sub-task."""
        return self.successes / self.done if self.done else None


class CapabilityTable:
    """Running success of each worker role on each kind of sub-task, and the choice of a worker by UCB1.

    ``choose(kind)`` picks, among the roles, one never assigned ``kind`` yet (in the roles' order), else the
    one with the highest upper confidence bound

        UCB(role) = rate(role, kind) + exploration * sqrt(ln(N_kind) / n(role, kind))

    where ``n`` counts the sub-tasks of that kind assigned to the role and ``N_kind`` all of them. ``rate``
    is the success rate over finished sub-tasks (0.5 while none has finished). An assignment counts from
    the moment it is made, so the episodes of one batch, which all choose before any finishes, spread over
    the roles instead of all piling onto one. Ties go to a role drawn by the seeded generator.
    ``exploration=0`` is greedy after every role has been tried once. ``choose(kind, explore=False)``
    takes the best rate without the bonus (the held-out eval).
    """

    def __init__(self, roles: list[str], *, exploration: float = 1.0, seed: int = 0) -> None:
        if not roles:
            raise ValueError("a capability table needs at least one worker role")
        if exploration < 0:
            raise ValueError(f"exploration must be >= 0, got {exploration}")
        self.roles = list(roles)
        self.exploration = exploration
        self._records: dict[tuple[str, str], Record] = {}
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def _record(self, role: str, kind: str) -> Record:
        return self._records.setdefault((role, kind), Record())

    def choose(self, kind: str, *, explore: bool = True) -> str:
        """The worker role for the next sub-task of ``kind``; with ``explore`` the assignment is counted."""
        with self._lock:
            records = [self._record(role, kind) for role in self.roles]
            if explore:
                untried = [role for role, r in zip(self.roles, records, strict=True) if r.assigned == 0]
                if untried:
                    role = untried[0]
                    self._record(role, kind).assigned += 1
                    return role
            total = sum(r.assigned for r in records)

            def score(r: Record) -> float:
                rate = 0.5 if r.rate is None else r.rate
                if not explore:
                    return rate
                return rate + self.exploration * math.sqrt(math.log(total) / r.assigned)

            scores = [score(r) for r in records]
            best = max(scores)
            role = self._rng.choice([role for role, s in zip(self.roles, scores, strict=True) if s == best])
            if explore:
                self._record(role, kind).assigned += 1
            return role

    def record(self, role: str, kind: str, success: float) -> None:
        """``role`` finished a sub-task of ``kind`` with ``success`` (1 right, 0 wrong, or between)."""
        with self._lock:
            r = self._record(role, kind)
            r.done += 1
            r.successes += success

    def rates(self) -> dict[tuple[str, str], float]:
        """The running success rate of every (role, kind) with a finished sub-task."""
        with self._lock:
            return {key: r.rate for key, r in self._records.items() if r.rate is not None}

    def metrics(self) -> dict[str, float]:
        """The table as metrics: ``coordinator/capability/<role>/<kind>`` (the running success rate) and
        ``coordinator/assigned/<role>/<kind>`` (sub-tasks assigned so far)."""
        with self._lock:
            out = {
                f"coordinator/assigned/{role}/{kind}": float(r.assigned)
                for (role, kind), r in self._records.items()
            }
            for (role, kind), r in self._records.items():
                if r.rate is not None:
                    out[f"coordinator/capability/{role}/{kind}"] = r.rate
            return out

    def state_dict(self) -> dict[str, Any]:
        """The table as JSON-able data (``load_state_dict`` restores it)."""
        with self._lock:
            return {
                "records": [
                    {"role": role, "kind": kind, **asdict(r)} for (role, kind), r in self._records.items()
                ]
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._records = {
                (row["role"], row["kind"]): Record(row["assigned"], row["done"], row["successes"])
                for row in state["records"]
            }
