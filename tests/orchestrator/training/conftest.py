"""The uninterrupted short run (short_run.py) that test_resume.py, test_learner_killed.py and
test_learner_workers.py compare with: started once per session, and only when one of them runs."""

import subprocess
import sys

import pytest

from tests.orchestrator.training.short_run import ARGS, metrics


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory) -> list[dict]:
    """Per-step metrics of the run `ARGS` describes, uninterrupted, one learner (checkpoints do not
    change them)."""
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *ARGS, f"output_dir={run}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return metrics(run)


@pytest.fixture(scope="session")
def uninterrupted_rewards(uninterrupted) -> list[float]:
    return [m["reward_mean"] for m in uninterrupted]
