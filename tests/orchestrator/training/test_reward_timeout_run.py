"""`train` with a reward function that never returns: the run stops at the reward task's deadline
(`reward_timeout_s`) with a one-line error, instead of waiting for the function forever.

Marked slow (the engines start for one step: 1.5 to 3 minutes here); the deadline itself is
checked in tests/orchestrator/rewards/test_scoring_deadline.py."""

import subprocess
import sys

import pytest


@pytest.mark.engines
@pytest.mark.slow
def test_a_train_run_with_a_hanging_reward_stops_with_a_one_line_error(tmp_path):
    """The reward sleeps for an hour: the run ends at its first step's deadline, after the engines start."""
    reward = tmp_path / "sleepy.py"
    reward.write_text("import time\ndef sleepy(prompts, completions, **kw):\n    time.sleep(3600)\n")
    args = ["prompts_per_step=2", "num_generations=2", "max_completion_length=8", "max_steps=2", "reward_timeout_s=3"]
    args += [f"reward_funcs=['{reward}:sleepy']", f"output_dir={tmp_path / 'run'}"]
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"error: reward function '{reward}:sleepy' did not return within reward_timeout_s=3 on 4 samples" in proc.stderr
    assert "Traceback" not in proc.stderr
