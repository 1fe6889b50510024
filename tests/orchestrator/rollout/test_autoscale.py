"""The autoscaling policy on recorded step timings, without Ray: it grows while the learner waits for
generation, shrinks while generation keeps ahead, holds inside the band, waits out its cooldown and
for engines still starting, and undoes a growth that did not raise throughput."""

import pytest

from orchestrator.contracts.rollout import AutoscaleSettings, RolloutConfig
from orchestrator.rollout.autoscale import Autoscaler, StepTimings

SETTINGS = AutoscaleSettings(min_engines=1, max_engines=3, grow_above=0.5, shrink_below=0.1, window_steps=2, cooldown_steps=1)


def step(wait: float, tokens_per_s: float = 100.0, step_s: float = 1.0) -> StepTimings:
    """A step of `step_s` seconds whose learner waited `wait` of it, the pool generating at `tokens_per_s`."""
    generation_s = wait * step_s
    return StepTimings(
        generate_s=generation_s, step_s=step_s, tokens=round(tokens_per_s * generation_s), generation_s=generation_s
    )


def run(scaler: Autoscaler, timings: list[StepTimings], serving=None) -> list[tuple[int, int]]:
    """(target, change) after each step; the pool serves its target unless `serving` says otherwise."""
    out = []
    for index, timing in enumerate(timings):
        serves = scaler.target if serving is None else serving[index]
        decision = scaler.decide(timing, serving=serves, pending=scaler.target - serves)
        out.append((decision.target, decision.change))
    return out


def test_it_grows_while_the_learner_waits_and_holds_at_max_engines():
    scaler = Autoscaler(SETTINGS, engines=1)
    # window of 2, then a resize, 1 step of cooldown, a fresh window; each growth doubles throughput (it pays)
    rates = [100, 100, 200, 200, 200, 300, 300, 300, 300]
    decisions = run(scaler, [step(0.8, rate) for rate in rates])
    assert decisions == [(1, 0), (2, 1), (2, 0), (2, 0), (3, 1), (3, 0), (3, 0), (3, 0), (3, 0)]
    assert "max_engines" in scaler.decide(step(0.8, 300), serving=3, pending=0).reason


def test_it_shrinks_while_generation_keeps_ahead_down_to_min_engines():
    scaler = Autoscaler(SETTINGS, engines=3)
    decisions = run(scaler, [step(0.02)] * 9)
    assert [target for target, _ in decisions] == [3, 2, 2, 2, 1, 1, 1, 1, 1]
    assert scaler.target == SETTINGS.min_engines


def test_inside_the_band_it_holds():
    scaler = Autoscaler(SETTINGS, engines=2)
    decisions = run(scaler, [step(wait) for wait in (0.3, 0.45, 0.12, 0.49, 0.2, 0.11)])
    assert {change for _, change in decisions} == {0} and scaler.target == 2
    assert "holding" in scaler.decide(step(0.3), serving=2, pending=0).reason


def test_it_decides_on_the_window_not_one_step():
    scaler = Autoscaler(SETTINGS, engines=1)
    assert run(scaler, [step(0.9), step(0.05)]) == [(1, 0), (1, 0)]  # a mean wait of 0.475: inside the band


def test_engines_still_starting_are_waited_for_not_counted_against_the_pool():
    scaler = Autoscaler(SETTINGS.model_copy(update={"cooldown_steps": 0}), engines=1)
    decisions = run(scaler, [step(0.8)] * 7, serving=[1, 1, 1, 1, 1, 2, 2])
    assert decisions[:2] == [(1, 0), (2, 1)]
    assert decisions[2:5] == [(2, 0)] * 3  # a node for the second engine has not come: no decision
    assert decisions[5:] == [(2, 0), (2, 0)]  # its first batch (warm-up) is not measured, then the window refills
    assert "waiting for 1 engine(s) to start" in scaler.decide(step(0.8), serving=1, pending=1).reason
    assert "warming up" in scaler.decide(step(0.8), serving=2, pending=0).reason


def test_an_engine_that_never_came_is_given_up_and_the_pool_goes_on_from_what_serves():
    scaler = Autoscaler(SETTINGS.model_copy(update={"cooldown_steps": 0}), engines=2)
    decision = scaler.decide(step(0.8), serving=1, pending=0)  # its start deadline passed, or it died for good
    assert scaler.target == 1 and "never came: going on from the 1 serving" in decision.reason
    assert run(scaler, [step(0.8)] * 2) == [(1, 0), (2, 1)]  # and it decides again (here: grow)
    floor = Autoscaler(SETTINGS.model_copy(update={"min_engines": 2, "cooldown_steps": 0}), engines=2)
    again = floor.decide(step(0.05), serving=1, pending=0)  # below min_engines: never left there
    assert (again.target, again.change) == (2, 1) and "asking again for min_engines=2" in again.reason


def test_a_growth_that_did_not_raise_throughput_is_undone_and_not_tried_again():
    scaler = Autoscaler(SETTINGS.model_copy(update={"min_gain": 0.1, "retry_growth_steps": None}), engines=1)
    decisions = run(scaler, [step(0.8, 100)] * 2 + [step(0.8, 105)] * 3)  # two engines: +5% only
    assert decisions == [(1, 0), (2, 1), (2, 0), (2, 0), (1, -1)]
    assert scaler.ceiling == 1
    later = run(scaler, [step(0.8, 100)] * 4)
    assert {target for target, _ in later} == {1}
    assert "the last growth did not pay" in scaler.decide(step(0.8), serving=1, pending=0).reason


def test_growth_is_tried_again_once_retry_growth_steps_have_passed():
    scaler = Autoscaler(SETTINGS.model_copy(update={"min_gain": 0.1, "retry_growth_steps": 6}), engines=1)
    run(scaler, [step(0.8, 100)] * 2 + [step(0.8, 105)] * 3)  # undone, as above: ceiling 1 for 6 steps
    assert scaler.ceiling == 1
    decisions = run(scaler, [step(0.8, 100)] * 6)
    assert decisions[:5] == [(1, 0)] * 5 and decisions[5] == (2, 1)  # the sixth step may grow again
    assert scaler.ceiling == SETTINGS.max_engines


def test_a_manual_resize_starts_a_cooldown_and_ends_a_growth_on_trial():
    scaler = Autoscaler(SETTINGS, engines=1)
    assert run(scaler, [step(0.8, 100)] * 2) == [(1, 0), (2, 1)]  # a growth on trial
    scaler.resized(1)  # `scale --engines 1`
    assert "cooling down" in scaler.decide(step(0.02), serving=1, pending=0).reason
    decisions = run(scaler, [step(0.3, 50)] * 3)  # half the throughput: judged against nothing, never undone
    assert {target for target, _ in decisions} == {1} and scaler.ceiling == SETTINGS.max_engines


def test_bad_bounds_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"min_engines \(3\) is above max_engines \(2\)"):
        AutoscaleSettings(min_engines=3, max_engines=2)
    with pytest.raises(ValueError, match=r"shrink_below \(0.5\) must be below grow_above \(0.5\)"):
        AutoscaleSettings(shrink_below=0.5, grow_above=0.5)
    with pytest.raises(ValueError, match=r"engines \(5\) is outside autoscale's bounds \[1, 4\]"):
        RolloutConfig(engines=5, autoscale={"max_engines": 4})


def test_a_judges_pool_keeps_its_size():
    from orchestrator.contracts.judges import JudgeSettings

    with pytest.raises(ValueError, match="pool.autoscale: a judge's pool keeps its size"):
        JudgeSettings(model="m", pool={"autoscale": {}})
