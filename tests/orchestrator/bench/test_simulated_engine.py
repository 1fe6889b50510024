"""The simulated engine's timing model: what a user of `simulate` relies on to trust the ideal rate."""

import pytest

from orchestrator.bench.simulated_engine import SimulatedEngine, TokenTiming, completion_lengths


def _timing(**overrides):
    values = {"step_base_s": 0.010, "step_per_sample_s": 0.001, "prefill_per_token_s": 0.0001, "mean_completion_tokens": 50}
    return TokenTiming(**{**values, **overrides})


def test_lengths_depend_on_seed_and_group_only_and_respect_the_cap():
    assert completion_lengths(3, 17, 8, 50, 256) == completion_lengths(3, 17, 8, 50, 256)
    assert completion_lengths(3, 17, 8, 50, 256) != completion_lengths(3, 18, 8, 50, 256)
    many = [length for group in range(2000) for length in completion_lengths(0, group, 8, 50, 64)]
    assert min(many) >= 1 and max(many) == 64  # some samples run into the cap
    uncapped = [length for group in range(2000) for length in completion_lengths(0, group, 8, 50, 10_000)]
    assert 45 < sum(uncapped) / len(uncapped) < 55


def test_a_lone_sample_takes_prefill_plus_one_step_per_token():
    timing = _timing()
    engine = SimulatedEngine(timing)
    engine.admit(key=1, prompt_tokens=100, lengths=[20])
    done_at = 100 * 0.0001 + 20 * timing.step_s(1)
    assert engine.next_group_done() == pytest.approx(done_at)
    assert engine.advance(done_at - 1e-6) == []
    assert engine.advance(done_at + 1e-6) == [(1, pytest.approx(done_at))]
    assert engine.running == 0 and engine.next_group_done() is None


def test_steps_slow_down_with_the_batch_and_a_group_ends_with_its_last_sample():
    timing = _timing(prefill_per_token_s=0.0)
    engine = SimulatedEngine(timing)
    engine.admit(key=7, prompt_tokens=10, lengths=[10, 30])
    first = 10 * timing.step_s(2)  # both samples decode together
    last = first + 20 * timing.step_s(1)  # then the long one alone, on faster steps
    assert engine.advance(first + 1e-9) == []  # one sample done, the group is not
    assert engine.running == 1 and engine.groups == 1
    assert engine.advance(last + 1e-9) == [(7, pytest.approx(last))]


def test_a_group_admitted_later_shares_the_steps_from_then_on():
    timing = _timing(prefill_per_token_s=0.0, step_per_sample_s=0.0)  # steps cost the same at any batch
    engine = SimulatedEngine(timing)
    engine.admit(key=1, prompt_tokens=0, lengths=[10])
    engine.advance(5 * timing.step_base_s)
    engine.admit(key=2, prompt_tokens=0, lengths=[10])
    finished = engine.advance(100 * timing.step_base_s)
    assert finished == [(1, pytest.approx(10 * timing.step_base_s)), (2, pytest.approx(15 * timing.step_base_s))]


def test_prefill_of_a_new_group_pauses_decoding():
    timing = _timing(step_per_sample_s=0.0)
    engine = SimulatedEngine(timing)
    engine.admit(key=1, prompt_tokens=0, lengths=[10])
    engine.advance(2 * timing.step_base_s)
    engine.admit(key=2, prompt_tokens=50, lengths=[1])  # 5 ms of prefill
    expected = 10 * timing.step_base_s + 50 * timing.prefill_per_token_s
    assert dict(engine.advance(1.0))[1] == pytest.approx(expected)


def test_time_only_runs_forward():
    engine = SimulatedEngine(_timing(), now=5.0)
    with pytest.raises(ValueError, match="forward"):
        engine.advance(4.0)


def test_next_group_done_is_when_advance_finishes_the_next_group():
    import random

    rng = random.Random(1)
    engine = SimulatedEngine(_timing())
    for key in range(6):
        engine.admit(key, prompt_tokens=rng.randrange(50), lengths=[rng.randrange(1, 40) for _ in range(4)])
        engine.advance(engine.clock + 0.05)
    while engine.groups:
        expected = engine.next_group_done()
        [(key, at)] = engine.advance(expected + 1e-9)
        assert at == pytest.approx(expected)
