"""Constants the Tinker service tests share with their fixtures (tests/serve/conftest.py)."""

API_KEY = "tml-rllm-tests"
MAX_SAMPLERS = 2
