"""The run folder: what a run leaves behind, and where.

    config.yaml            the resolved config
    metrics.jsonl          one JSON object per step
    rollouts/step-NNNNNN.parquet   every sample of the step (rollout schema + step, reward, advantage)
    plots/reward.png, plots/timings.png
    checkpoints/step-NNNNNN/       HF model + canonical tokenizer (transformers and vLLM load it as is)
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from orchestrator.errors import UserError


class RunDir:
    def __init__(self, root: Path):
        self.root = root
        self.metrics = root / "metrics.jsonl"
        self.rollouts = root / "rollouts"
        self.plots = root / "plots"
        self.checkpoints = root / "checkpoints"

    @staticmethod
    def create(template: str) -> RunDir:
        root = Path(template.replace("{time}", time.strftime("%Y%m%d-%H%M%S")))
        if root.exists() and any(root.iterdir()):
            raise UserError(f"output_dir {root} already holds files; choose another output_dir")
        return RunDir(root)

    def prepare(self, config_dump: dict) -> None:
        for folder in (self.root, self.rollouts, self.plots, self.checkpoints):
            folder.mkdir(parents=True, exist_ok=True)
        (self.root / "config.yaml").write_text(yaml.safe_dump(config_dump, sort_keys=False))

    def rollout_file(self, step: int) -> Path:
        return self.rollouts / f"step-{step:06d}.parquet"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step-{step:06d}"
