"""Micro-batches formed by length under a token budget, without torch."""

import numpy as np
import pytest

from workers.learner import micro_batches


def _lengths(seed: int, samples: int = 200):
    rng = np.random.default_rng(seed)
    prompts = rng.integers(5, 40, size=samples)
    completions = np.minimum(rng.geometric(1 / 72, size=samples), 512)
    return prompts, completions


@pytest.mark.parametrize("packed,one_row", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("seed", range(5))
def test_every_sample_once_and_no_micro_batch_over_the_budget(seed, packed, one_row):
    prompts, completions = _lengths(seed)
    plan = micro_batches.plan(prompts, completions, 2048, None, packed, one_row)
    rows = np.concatenate(plan.micro_batches)
    assert sorted(rows.tolist()) == list(range(len(prompts)))
    for members in plan.micro_batches:
        cost = micro_batches.cost(prompts[members], completions[members], packed, one_row)
        assert cost <= 2048 or len(members) == 1, (members, cost)  # a sample over the budget is alone
    assert plan.slots >= plan.tokens == int(prompts.sum() + completions.sum())


def test_packing_wastes_less_than_padding_and_one_row_nothing():
    prompts, completions = _lengths(0)
    padded, rows, one_row = (
        micro_batches.plan(prompts, completions, 4096, None, packed, one)
        for packed, one in ((False, False), (True, False), (True, True))
    )
    whole = micro_batches.plan(prompts, completions, None, None, packed=False)
    waste = [1.0 - p.tokens / p.slots for p in (whole, padded, rows, one_row)]  # the step's learner/pad_fraction
    assert waste[0] > waste[1] > waste[2] > waste[3] == 0.0
    assert len(one_row.micro_batches) <= len(rows.micro_batches) <= len(padded.micro_batches)


def test_a_row_cap_and_the_old_slices():
    prompts, completions = _lengths(1, samples=10)
    capped = micro_batches.plan(prompts, completions, 10**6, 3, packed=True)
    assert [len(members) for members in capped.micro_batches] == [3, 3, 3, 1]
    slices = micro_batches.plan(prompts, completions, None, 4, packed=False)
    assert [members.tolist() for members in slices.micro_batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
