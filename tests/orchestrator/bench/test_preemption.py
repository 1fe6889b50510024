"""The preemption model (orchestrator/bench/preemption.py): what a drain costs with and without continuation,
on fleets small enough to follow by hand."""

import dataclasses

from orchestrator.bench import preemption
from orchestrator.bench.simulated_engine import TokenTiming

SLOW_STEPS = TokenTiming(step_base_s=0.045)  # 46 ms a token with 4 samples in flight, as the full-size fleet's 64
FLEET = preemption.Fleet(
    engines=4,
    engines_per_node=2,
    capacity=4,
    n=2,
    mean_tokens=400,
    max_tokens=2000,
    timing=SLOW_STEPS,
    drains_per_node_hour=20,
    steps=4,
)


def test_without_continuation_a_drain_regenerates_the_groups_its_notice_cut_short():
    without = preemption.run(FLEET, continuation=False)
    assert without["drains"] > 0
    assert without["regenerated_tokens"] > 0 and without["continued_tokens"] == 0
    assert 0 < without["wasted_share"] < 1


def test_with_continuation_nothing_is_generated_twice_and_every_token_is_made_once():
    with_ = preemption.run(FLEET, continuation=True)
    assert with_["drains"] > 0 and with_["continued_samples"] > 0
    assert with_["regenerated_tokens"] == 0 and with_["wasted_share"] == 0.0
    run = preemption._Run(FLEET, continuation=True)
    run.go()
    # every sample's tokens made exactly once, across its runs on several engines
    assert run.figures["generated_tokens"] == sum(sample.length for sample in run.samples)


def test_the_same_drains_cost_the_step_time_only_without_continuation():
    without, with_ = preemption.run(FLEET, False), preemption.run(FLEET, True)
    calm = preemption.run(dataclasses.replace(FLEET, drains_per_node_hour=1e-9), False)
    assert with_["step_s"] < without["step_s"]  # one seed: the same lengths, and the same drains at the same moments
    assert calm["drains"] == 0 and calm["step_s"] <= with_["step_s"]
