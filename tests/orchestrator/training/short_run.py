"""The short `train` run that the stop, kill and restart tests compare with its uninterrupted self."""

import json

STEPS = 6
ARGS = [
    "prompts_per_step=2",
    "num_generations=4",
    "max_completion_length=12",
    f"max_steps={STEPS}",
    "learning_rate=3e-3",
    "seed=5",
    "plot_steps=100",
]


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
