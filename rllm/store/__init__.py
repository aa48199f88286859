"""The run store: one SQLite file (WAL) per workspace that records runs for ``rllm ui`` and the CLI.

Written by ``rllm train`` (:class:`~rllm.trainer.agent_trainer.AgentTrainer`) and ``rllm eval`` through a
:class:`RunWriter`; read by :class:`StoreReader` (the UI's JSON API). Layout: :mod:`rllm.store.schema`;
what an episode becomes: :mod:`rllm.store.records`. docs/ui.md describes it for users.

Beside it, each run directory has an :class:`EpisodeJournal` (``journal.db``): every finished episode of
the run, for exactly-once resume and ``rllm replay`` (docs/async.md, "Recovery and replay").
"""

from rllm.store.journal import EpisodeJournal
from rllm.store.reader import EpisodeQuery, NotFound, StoreReader
from rllm.store.records import sample_episodes
from rllm.store.schema import StoreError
from rllm.store.writer import RunWriter, default_store_path

__all__ = [
    "EpisodeJournal",
    "EpisodeQuery",
    "NotFound",
    "RunWriter",
    "StoreError",
    "StoreReader",
    "default_store_path",
    "sample_episodes",
]
