"""The run folder: what a run leaves behind, and where.

    config.yaml            the resolved config
    metrics.jsonl          one JSON object per step
    rollouts/step-NNNNNN.parquet   every sample of the step (rollout schema + step, reward, advantage)
    plots/reward.png, plots/timings.png
    checkpoints/step-NNNNNN/       HF model + canonical tokenizer (transformers and vLLM load it as is)
    control.json           run-time requests (rollout engine count), read at the start of every step
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import yaml

from orchestrator.contracts.errors import UserError


STATE_FILE = "orchestrator_state.json"


@dataclasses.dataclass(frozen=True)
class ResumeState:
    """Where the driver stood when a checkpoint was written."""

    step: int
    stream_position: int
    policy_version: int


class RunDir:
    def __init__(self, root: Path):
        self.root = root
        self.metrics = root / "metrics.jsonl"
        self.rollouts = root / "rollouts"
        self.plots = root / "plots"
        self.checkpoints = root / "checkpoints"
        self.control = root / "control.json"  # written by `python -m orchestrator scale`, read each step

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

    def write_checkpoint(self, step: int, save_learner, state: ResumeState) -> Path:
        """Write `checkpoints/step-N` atomically: a crash mid-save leaves the last good one intact."""
        final = self.checkpoint(step)
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        save_learner(str(partial))
        (partial / STATE_FILE).write_text(json.dumps(dataclasses.asdict(state)))
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        return final

    def latest_checkpoint(self) -> tuple[Path, ResumeState]:
        complete = sorted(p for p in self.checkpoints.glob("step-*") if (p / STATE_FILE).is_file() and "." not in p.name)
        if not complete:
            raise UserError(f"{self.checkpoints} holds no complete checkpoint to resume from")
        latest = complete[-1]
        return latest, ResumeState(**json.loads((latest / STATE_FILE).read_text()))

    def forget_after(self, step: int) -> None:
        """Drop what a run recorded after the checkpoint it resumes from (those steps run again)."""
        if self.metrics.is_file():
            kept = [line for line in self.metrics.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
            self.metrics.write_text("".join(line + "\n" for line in kept))
        for path in self.rollouts.glob("step-*.parquet"):
            if int(path.stem.removeprefix("step-")) > step:
                path.unlink()

    @staticmethod
    def existing(root: str) -> RunDir:
        run = RunDir(Path(root))
        if not (run.root / "config.yaml").is_file():
            raise UserError(f"--resume {root}: no config.yaml there (expected the output_dir of a train run)")
        return run
