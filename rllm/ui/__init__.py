"""``rllm ui``: a web UI over the run store (JSON API in :mod:`rllm.ui.app`, front end in ``static/``)."""
