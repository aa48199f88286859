"""rllm's version: a module of its own at the bottom of the layers, so any layer can read it (the run store
records it with every run) without importing the top-level package, which names every layer."""

__version__ = "0.1.0"
