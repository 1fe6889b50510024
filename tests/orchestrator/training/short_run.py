"""The short `train` run that the stop, kill and restart tests compare with its uninterrupted self."""

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

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


def train_config(folder: Path, config: dict, **run) -> Path:
    """`train --config` on `config`, written to `folder/config.yaml`; its output_dir once it succeeded.
    `run`: subprocess.run's own options (env, cwd)."""
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", "--config", str(folder / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        **run,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Path(config["output_dir"])


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def start_until(run, lines: int, *args: str, **popen) -> subprocess.Popen:
    """`train *ARGS *args` on `run` in the background, returned once metrics.jsonl has `lines` lines
    (the next step has started)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "train", *ARGS, *args, f"output_dir={run}"], **popen)
    deadline = time.monotonic() + 400
    while not (run / "metrics.jsonl").is_file() or (run / "metrics.jsonl").read_text().count("\n") < lines:
        assert proc.poll() is None and time.monotonic() < deadline, f"the run ended or stalled before step {lines + 1}"
        time.sleep(0.01)
    return proc
