"""The run folder: what a run leaves behind, and where.

    config.yaml            the resolved config
    metrics.jsonl          one JSON object per step
    rollouts/step-NNNNNN.parquet   every sample of the step (rollout schema + step, reward, advantage)
    plots/reward.png, plots/timings.png
    checkpoints/step-NNNNNN/       HF model + canonical tokenizer (transformers and vLLM load it as is)
    control.json           run-time requests (rollout engine count), read at the start of every step

Checkpoints and rollout files are written under a `.partial` name and renamed when complete, so a
driver killed at any moment leaves only whole files under their final names; `--resume` removes
the `.partial` leftovers and refuses a checkpoint that is damaged.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import zipfile
from pathlib import Path

import yaml

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.learning import LEARNER_STATE
from orchestrator.output_paths import check_creatable

STATE_FILE = "orchestrator_state.json"


@dataclasses.dataclass(frozen=True)
class ResumeState:
    """Where the driver stood when a checkpoint was written."""

    step: int
    stream_position: int
    policy_version: int
    learner_fsdp: bool = False  # a sharded learner writes its optimizer state by parameter name


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
        """The run folder `template` names, checked but not created yet (`prepare` creates it)."""
        root = Path(template.replace("{time}", time.strftime("%Y%m%d-%H%M%S")))
        check_creatable(root, "output_dir", folder=True)
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
        """The newest checkpoint, checked from its file headers. An unfinished save (`.partial`) is
        never a candidate; a damaged finished one is an error, not skipped: falling back silently
        would discard the steps after the older checkpoint."""
        saved = sorted(p for p in self.checkpoints.glob("step-*") if p.is_dir() and "." not in p.name)
        if not saved:
            raise UserError(
                f"--resume {self.root}: no complete checkpoint in {self.checkpoints} (the run stopped before its first "
                "save; start it again, with save_steps=N to checkpoint every N steps)"
            )
        latest = saved[-1]
        state, problem = _read_checkpoint(latest)
        if problem:
            fallback = f"; delete that folder to resume from {saved[-2].name}" if len(saved) > 1 else ""
            raise UserError(f"--resume {self.root}: checkpoint {latest.name} is damaged: {problem}{fallback}")
        return latest, state

    def forget_after(self, step: int) -> None:
        """Drop what a run recorded after the checkpoint it resumes from (those steps run again),
        and what a killed driver left half-written."""
        if self.metrics.is_file():
            kept = "".join(line + "\n" for line in self._metric_lines() if json.loads(line)["step"] <= step)
            partial = self.metrics.with_name(self.metrics.name + ".partial")  # a kill now must not lose the file
            partial.write_text(kept)
            partial.replace(self.metrics)
        for path in self.rollouts.glob("step-*.parquet"):
            if int(path.stem.removeprefix("step-")) > step:
                path.unlink()
        for path in self.rollouts.glob("*.partial"):
            path.unlink()
        for path in self.checkpoints.glob("*.partial"):
            shutil.rmtree(path)

    def _metric_lines(self) -> list[str]:
        """metrics.jsonl's lines; a last line cut short (a driver killed while writing it) is dropped."""
        lines = [line for line in self.metrics.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        for number, line in enumerate(lines, start=1):
            try:
                json.loads(line)["step"]
            except (json.JSONDecodeError, KeyError, TypeError):
                if number == len(lines):
                    return lines[:-1]
                raise UserError(f"{self.metrics}:{number}: not a metrics record (expected one JSON object per step)") from None
        return lines

    @staticmethod
    def existing(root: str) -> RunDir:
        run = RunDir(Path(root))
        if not run.root.is_dir():
            what = "is a file" if run.root.exists() else "does not exist"
            raise UserError(f"--resume {root} {what} (expected the output_dir of a train run)")
        if not (run.root / "config.yaml").is_file():
            raise UserError(f"--resume {root}: no config.yaml there (expected the output_dir of a train run)")
        return run


def resume_hint(run_dir: RunDir, saved: tuple[Path, ResumeState] | None) -> str:
    """What a stopped run can be continued from, and the command that does it."""
    if saved is None:
        return (
            "no checkpoint was written before that, so there is nothing to resume: start the run again with another "
            "output_dir (save_steps=N checkpoints every N steps)"
        )
    checkpoint, state = saved
    return (
        f"the last complete checkpoint is {checkpoint} (step {state.step}); continue with: "
        f"python -m orchestrator train --resume {run_dir.root}"
    )


def _read_checkpoint(folder: Path) -> tuple[ResumeState | None, str | None]:
    """(the driver's state, None) for a usable checkpoint, else (None, what is wrong with it)."""
    from orchestrator.models import model_folder_problem

    try:
        state = ResumeState(**json.loads((folder / STATE_FILE).read_bytes()))
    except FileNotFoundError:
        return None, f"{STATE_FILE} is missing"
    except (ValueError, TypeError) as error:  # bad JSON or other keys
        return None, f"{STATE_FILE} is unreadable ({error})"
    learner_state = folder / LEARNER_STATE
    if not learner_state.is_file():
        return None, f"{LEARNER_STATE} is missing"
    # torch.save writes a zip archive with its index at the end: a truncated file has no index
    if not zipfile.is_zipfile(learner_state):
        return None, f"{LEARNER_STATE} is truncated or not a torch.save archive"
    problem = model_folder_problem(folder)
    if problem:
        return None, problem
    if not (folder / "tokenizer_config.json").is_file():
        return None, "tokenizer_config.json is missing (the canonical tokenizer is saved beside the weights)"
    return state, None
