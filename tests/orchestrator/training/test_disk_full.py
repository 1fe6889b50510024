"""A run whose folder fills its disk stops with one line naming the checkpoint, the filesystem and the
command that resumes it; no half-written checkpoint is left for `--resume` to take, and once space is
freed the resumed run records every step exactly once. `save_total_limit` keeps the newest checkpoints,
those of the run before a resume included. Each run folder is on a small tmpfs (small_disk.py).

Marked slow (three `train` runs, 3 to 8 minutes here); the same faults without engines, on real
small filesystems, are in test_run_dir.py."""

import json
import re
import subprocess
import sys
import zipfile

import pytest

from orchestrator.training.run_dir import STATE_FILE
from tests.orchestrator.training.small_disk import resize, small_disk

pytestmark = [pytest.mark.engines, pytest.mark.slow]

# A checkpoint of the built-in tiny model takes about 2 MB: 5 MB holds two, not a third.
ARGS = [
    "prompts_per_step=2",
    "num_generations=4",
    "max_completion_length=12",
    "max_steps=4",
    "save_steps=1",
    "seed=5",
    "plot_steps=100",
]


def _train(*args):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *args], capture_output=True, text=True, timeout=600, check=False
    )


def _error_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


def _steps(run) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _checkpoints(run) -> list[str]:
    return sorted(path.name for path in (run / "checkpoints").iterdir())


def test_a_full_disk_stops_the_run_in_one_line_and_the_resumed_run_finishes_it(tmp_path):
    with small_disk(tmp_path / "disk", "5m") as disk:
        run = disk / "run"
        full = _train(*ARGS, f"output_dir={run}")
        assert full.returncode == 1, full.stderr[-3000:]
        [line] = _error_lines(full)
        stopped = re.match(r"error: no space left on device writing checkpoints/step-(\d{6}) \(", line)
        assert stopped, line
        assert line.endswith(f"with: python -m orchestrator train --resume {run}") and f"free space on {disk}," in line
        assert "Traceback" not in full.stderr and "enforce fail" not in full.stdout + full.stderr
        failed = int(stopped.group(1))
        assert failed >= 2
        saved = _checkpoints(run)
        assert saved == [f"step-{step:06d}" for step in range(1, failed)]  # no `.partial`, none damaged
        for name in saved:
            assert (run / "checkpoints" / name / STATE_FILE).is_file()
            assert zipfile.is_zipfile(run / "checkpoints" / name / "learner_state.pt")

        resize(disk, "64m")  # space freed
        resumed = _train("--resume", str(run), "save_total_limit=2")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"from step-{failed - 1:06d}" in resumed.stdout
        assert _steps(run) == [1, 2, 3, 4]
        assert _checkpoints(run) == ["step-000003", "step-000004"]  # those from before the resume counted

        longer = _train("--resume", str(run), "save_total_limit=2", "max_steps=5")
        assert longer.returncode == 0, longer.stderr[-3000:]
        assert "from step-000004" in longer.stdout
        assert _steps(run) == [1, 2, 3, 4, 5]
        assert _checkpoints(run) == ["step-000004", "step-000005"]


def test_a_first_checkpoint_too_big_for_the_disk_fails_in_the_learner_and_is_said_in_one_line(tmp_path):
    """The learner's own write fails (torch.save's short write, through Ray), with no earlier checkpoint
    to compare with: the error still says it is the disk, and that there is nothing to resume."""
    with small_disk(tmp_path / "disk", "1m") as disk:
        run = disk / "run"
        full = _train(*ARGS, "max_steps=1", f"output_dir={run}")
        assert full.returncode == 1, full.stderr[-3000:]
        [line] = _error_lines(full)
        assert line.startswith("error: no space left on device writing checkpoints/step-000001 ("), line
        assert f": 0.0 MB free of 1.0 MB on {disk};" in line
        assert line.endswith("(no checkpoint was complete, so there is nothing to resume)")
        assert _checkpoints(run) == []
