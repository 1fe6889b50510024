"""`train` with `learner.workers=2` (two learner actors, one gloo data-parallel group) against real
vLLM engines: it trains the run one learner trains (per-step loss within 1e-4), every sync's checksum
verified by the engines and their logprobs matching the learner's as with one learner, and a run
stopped after step 3 resumes from the 2-rank checkpoint and continues the same way."""

import subprocess
import sys

import pytest

from tests.orchestrator.training.short_run import ARGS, STEPS, metrics

pytestmark = [
    pytest.mark.engines,
    pytest.mark.slow,
]  # ~2.5 min; tests/orchestrator/learner/test_group.py covers the group without engines


def _train(*args):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *args], capture_output=True, text=True, timeout=600, check=False
    )


def test_two_learner_workers_train_and_resume_as_one(tmp_path, uninterrupted):
    run = tmp_path / "run"
    first = _train(*ARGS, "learner.workers=2", "max_steps=3", f"output_dir={run}")  # checkpoints at its last step
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = _train("--resume", str(run), f"max_steps={STEPS}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from step-000003 (step 3)" in resumed.stdout

    two = metrics(run)
    assert [m["step"] for m in two] == list(range(1, STEPS + 1))
    for mine, reference in zip(two, uninterrupted):
        assert mine["loss"] == pytest.approx(reference["loss"], abs=1e-4), mine["step"]
    # every sync was verified (a checksum the engines did not receive stops the run); logprobs as with one learner
    assert max(m["sampling/sampling_logp_difference/mean"] for m in two) < 0.01
    print("per-step loss, 2 workers vs 1:", [(round(m["loss"], 7), round(r["loss"], 7)) for m, r in zip(two, uninterrupted)])
