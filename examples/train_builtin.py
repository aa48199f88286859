"""Train from Python instead of the CLI: what `rllm train CONFIG key=value ...` does, in a few lines.

Loads the default config from YAML, overrides two keys the way the command line does, trains the
built-in model on the built-in task with rllm.AgentTrainer, and reads the held-out greedy accuracy
before and after from the returned TrainResult. Run: .venv/bin/python examples/train_builtin.py
"""

import logging
from pathlib import Path

import rllm

logging.basicConfig(level=logging.INFO, format="%(message)s")
config = rllm.load_config(
    rllm.TrainConfig,
    Path(__file__).parent / "configs" / "larger_lora.yaml",
    [
        "trainer.steps=20",
        "trainer.name=example-builtin",
    ],  # a second run needs trainer.resume=true or a new name
)
result = rllm.AgentTrainer(config).train()
print(result.accuracy_line())
print(f"final model: {result.final_model_dir}")
