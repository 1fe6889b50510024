"""The run folder: what a run leaves behind, and where.

    config.yaml            the resolved config
    metrics.jsonl          one JSON object per step
    rollouts/step-NNNNNN.parquet   every sample of the step (rollout schema + step, reward, advantage)
    plots/reward.png, plots/timings.png
    checkpoints/step-NNNNNN/       HF model + canonical tokenizer (transformers and vLLM load it as is)
    control.json           run-time requests (rollout engine count), read at the start of every step

Checkpoints and rollout files are written under a `.partial` name and renamed when complete, so a
driver killed at any moment leaves only whole files under their final names; `--resume` removes
the `.partial` leftovers and refuses a checkpoint that is damaged. With `save_total_limit: N` only
the newest N complete checkpoints stay (those of the run before a `--resume` count too). A full
disk stops the run with one line naming the file, the filesystem and the command that resumes it;
a checkpoint that did not fit is removed, so `--resume` takes the one before it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
import zipfile
from pathlib import Path

import yaml

from orchestrator.contracts.errors import RunError, UserError
from orchestrator.contracts.learning import LEARNER_STATE
from orchestrator.output_paths import check_creatable
from orchestrator.training import disk_space

STATE_FILE = "orchestrator_state.json"
_CHECKPOINT_NAME = re.compile(r"step-\d+")


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

    @property
    def resume_command(self) -> str:
        """The command that continues this run from its last complete checkpoint."""
        return f"python -m orchestrator train --resume {self.root}"

    def rollout_file(self, step: int) -> Path:
        return self.rollouts / f"step-{step:06d}.parquet"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step-{step:06d}"

    def write_checkpoint(self, step: int, save_learner, state: ResumeState, keep: int | None = None) -> Path:
        """Write `checkpoints/step-N` atomically: a crash mid-save leaves the last good one intact, and a
        failed save leaves nothing behind. A full disk (found before the save: less free space than the
        last checkpoint took; or by the failure) is a RunError naming the path and how to resume. With
        `keep`, the oldest complete checkpoints beyond the newest `keep` go once this one is complete."""
        final = self.checkpoint(step)
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        saved = self.complete_checkpoints()
        need = disk_space.size(saved[-1]) if saved else 0
        usage = shutil.disk_usage(self.checkpoints) if need else None
        if usage is not None and usage.free < need:
            raise RunError(self._no_space_message(final, usage, need))
        try:
            partial.mkdir(parents=True)
            save_learner(str(partial))
            (partial / STATE_FILE).write_text(json.dumps(dataclasses.asdict(state)))
        except BaseException as error:
            # asked while the half-written files still fill the disk
            full = isinstance(error, Exception) and disk_space.short_of_space(error, self.checkpoints)
            usage = shutil.disk_usage(self.checkpoints) if full else None
            shutil.rmtree(partial, ignore_errors=True)
            if full:
                raise RunError(self._no_space_message(final, usage, need)) from None
            raise
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        if keep is not None:
            self.prune_checkpoints(keep, final)
        return final

    def complete_checkpoints(self) -> list[Path]:
        """The finished checkpoints, oldest first (an unfinished save is named `.partial`)."""
        saved = [path for path in self.checkpoints.glob("step-*") if path.is_dir() and _CHECKPOINT_NAME.fullmatch(path.name)]
        return sorted(saved, key=lambda path: int(path.name.removeprefix("step-")))

    def prune_checkpoints(self, keep: int, newest: Path) -> None:
        """Delete the oldest complete checkpoints beyond the newest `keep` (TRL's save_total_limit), those
        a run left before a resume included; `newest`, the one just written, always stays."""
        older = [path for path in self.complete_checkpoints() if path != newest]
        for path in older[: max(len(older) - (keep - 1), 0)]:
            doomed = path.with_name(path.name + ".partial")  # a kill mid-delete leaves a leftover, not a damaged checkpoint
            shutil.rmtree(doomed, ignore_errors=True)
            path.rename(doomed)
            shutil.rmtree(doomed)

    def raise_if_disk_full(self, error: BaseException, path: str | Path | None = None) -> None:
        """Raise the RunError that stops the run, in one line, when `error` is a lack of space writing
        `path` (None: some file of the run folder, then only if its filesystem is nearly full)."""
        if disk_space.short_of_space(error, self.root, path_known=path is not None):
            target = Path(path) if path is not None else None
            usage = shutil.disk_usage(disk_space.existing(target if target is not None else self.root))
            raise RunError(self._no_space_message(target, usage)) from None

    def _no_space_message(self, target: Path | None, usage, need: int = 0) -> str:
        """One line: what did not fit, where, the room there was (`usage`, shutil.disk_usage's), and how
        to go on once there is more."""
        mount = disk_space.mount_point(disk_space.existing(target if target is not None else self.root))
        if target is None:
            name = f"to the run folder {self.root.absolute()}"
        elif target.absolute().is_relative_to(self.root.absolute()):
            name = f"{target.absolute().relative_to(self.root.absolute())} ({target.absolute()})"
        else:
            name = str(target.absolute())
        took = f", and the last checkpoint took {disk_space.size_text(need)}" if need else ""
        saved = self.complete_checkpoints()
        if saved:
            then = f"then resume from {saved[-1].name} with: {self.resume_command}"
        else:
            then = "then start the run again with another output_dir (no checkpoint was complete, so there is nothing to resume)"
        return (
            f"no space left on device writing {name}: {disk_space.size_text(usage.free)} free of {disk_space.size_text(usage.total)} "
            f"on {mount}{took}; free space on {mount}, {then}"
        )

    def latest_checkpoint(self) -> tuple[Path, ResumeState]:
        """The newest checkpoint, checked from its file headers. An unfinished save (`.partial`) is
        never a candidate; a damaged finished one is an error, not skipped: falling back silently
        would discard the steps after the older checkpoint."""
        saved = self.complete_checkpoints()
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
            try:
                partial.write_text(kept)
            except OSError as error:
                partial.unlink(missing_ok=True)
                self.raise_if_disk_full(error, self.metrics)
                raise
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
    return f"the last complete checkpoint is {checkpoint} (step {state.step}); continue with: {run_dir.resume_command}"


def _unsafe_globals(path: Path) -> list[str]:
    """What `torch.load(path, weights_only=True)`, as the learner loads its state (workers/learner/checkpoint.py),
    would refuse: the pickle's references to code, read from the archive without unpickling it."""
    import torch

    return torch.serialization.get_unsafe_globals_in_checkpoint(path)


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
    unsafe = _unsafe_globals(learner_state)
    if unsafe:
        return None, (
            f"{LEARNER_STATE} holds pickled objects other than tensors and plain values ({', '.join(unsafe[:5])}), which this "
            "project never writes; it is not loaded, since unpickling them could run code"
        )
    problem = model_folder_problem(folder)
    if problem:
        return None, problem
    if not (folder / "tokenizer_config.json").is_file():
        return None, "tokenizer_config.json is missing (the canonical tokenizer is saved beside the weights)"
    return state, None
