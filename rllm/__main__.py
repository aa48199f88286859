"""``python -m rllm``: the same command line as the ``rllm`` console script."""

import sys

from rllm.cli.main import main

sys.exit(main())
