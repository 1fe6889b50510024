"""`simulate --autoscale`: on a load whose completions double mid-run, the autoscaled pool keeps the
learner's wait under grow_above where a fixed pool of the starting size does not."""

import subprocess
import sys

from orchestrator.bench.autoscaling import Load, run
from orchestrator.contracts.rollout import AutoscaleSettings


def _wait(steps) -> float:
    tail = steps[len(steps) // 2 :]
    return sum(s.generate_s for s in tail) / sum(s.step_s for s in tail)


def test_the_autoscaled_pool_follows_the_load_and_a_fixed_one_does_not():
    load, settings = Load(), AutoscaleSettings(max_engines=8)
    half = load.steps // 2
    fixed, scaled = run(load, None, 1), run(load, settings, 1)
    assert _wait(fixed[:half]) > 0.7 and _wait(fixed[half:]) > 0.8
    assert _wait(scaled[:half]) < settings.grow_above and _wait(scaled[half:]) < settings.grow_above
    assert scaled[half - 1].engines < scaled[-1].engines <= settings.max_engines  # it grew again when the load doubled


def test_the_command_prints_both_pools():
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "simulate", "--autoscale", "--max-engines", "4"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "fixed (1 engine(s))" in out and "autoscaled (from 1)" in out and "'max_engines': 4" in out
