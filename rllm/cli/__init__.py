"""The ``rllm`` command (``rllm train | eval | gateway | serve | ui | dataset | model``; entry point
``rllm.cli.main:main``). Its public surface is the command line, not Python names."""

__all__: list[str] = []
