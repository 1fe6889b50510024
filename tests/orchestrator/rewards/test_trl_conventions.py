"""TRL's reward conventions work unchanged: `None` for a sample a function does not apply to (NaN in
its column, left out of the weighted sum), `async def` functions (awaited, concurrently within a
call), and TRL's own `trl.rewards` functions on conversational prompts."""

import json
import math

import pytest

from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rewards.functions import RewardError, score
from orchestrator.rewards.scoring import RewardScorer

REWARDS = '''
import asyncio


def only_short(prompts, completions, **kw):
    """Applies to short completions only (None for the others), as TRL allows."""
    return [1.0 if len(c) < 4 else None for c in completions]


def never(prompts, completions, **kw):
    return [None] * len(completions)


async def async_length(prompts, completions, **kw):
    await asyncio.sleep(0)
    return [float(len(c)) for c in completions]


started = None


async def waits_for_partner(prompts, completions, **kw):
    """Finishes only if `partner` runs while it waits: the two are awaited together."""
    global started
    started = asyncio.Event()
    await asyncio.wait_for(started.wait(), timeout=5)
    return [1.0] * len(completions)


async def partner(prompts, completions, **kw):
    while started is None:
        await asyncio.sleep(0.01)
    started.set()
    return [2.0] * len(completions)
'''


@pytest.fixture
def rewards(tmp_path):
    path = tmp_path / "rewards.py"
    path.write_text(REWARDS)
    return str(path)


def test_none_means_not_applicable_and_is_left_out_of_the_weighted_sum(rewards):
    scores = score([f"{rewards}:only_short", "builtin:summary_length"], [2.0, 1.0], ["p"] * 2, ["ab", "abcdef"], [[1], [2]])
    assert scores[f"rewards/{rewards}:only_short"][0] == 1.0
    assert math.isnan(scores[f"rewards/{rewards}:only_short"][1])
    length = scores["rewards/builtin:summary_length"]
    assert scores["reward"] == [2.0 + length[0], length[1]]  # TRL's nansum over the functions that applied


def test_a_sample_no_function_scores_is_an_error_or_the_error_score(rewards):
    with pytest.raises(RewardError, match=r"no reward function scored sample 0 .*returned None for it"):
        score([f"{rewards}:never"], None, ["p"], ["abc"], [[1]])
    scores = score([f"{rewards}:never", f"{rewards}:only_short"], None, ["p"] * 2, ["ab", "abcdef"], [[1], [2]], error_score=-1.0)
    assert scores["reward"] == [1.0, -1.0] and scores["reward_errors"] == 1


def test_async_functions_are_awaited_together(rewards):
    scores = score([f"{rewards}:async_length", f"{rewards}:waits_for_partner", f"{rewards}:partner"], None, ["p"], ["abc"], [[1]])
    assert scores["reward"] == [3.0 + 1.0 + 2.0]


def test_trl_accuracy_reward_on_conversational_prompts_skips_unparseable_solutions(tmp_path, ray_session):
    """`trl.rewards.accuracy_reward` as a TRL user names it: conversational completions, a `solution`
    column, None for the samples whose gold answer math-verify cannot parse."""
    pytest.importorskip("math_verify")
    rows = [
        {"prompt": [{"role": "user", "content": "What is 1/3 + 1/3?"}], "solution": r"$\frac{2}{3}$"},
        {"prompt": [{"role": "user", "content": "Name a colour."}], "solution": "no math here"},  # unparseable
    ]
    requests, results = [], []
    for group, row in enumerate(rows):
        requests.append(GroupRequest(group, group, json.dumps(row["prompt"]), [1], 2, SamplingConfig()))
        replies = [r"It is $\boxed{\frac{2}{3}}$", r"It is $\boxed{\frac{1}{2}}$"]
        samples = [Sample(i, text, [1], [0.0], "stop", None, None) for i, text in enumerate(replies)]
        results.append(GroupResult(group, 0, 0, samples))
    scorer = RewardScorer(
        ["trl.rewards:accuracy_reward", "trl.rewards:think_format_reward"],
        None,
        None,
        [{"solution": row["solution"]} for row in rows],
        conversations=[row["prompt"] for row in rows],
    )
    rewards = scorer.begin(requests)
    for result in results:
        rewards.add(result)
    scores = rewards.close().scores()
    accuracy = scores["rewards/trl.rewards:accuracy_reward"]
    assert accuracy[:2] == [1.0, 0.0] and all(math.isnan(value) for value in accuracy[2:])
    assert scores["rewards/trl.rewards:think_format_reward"] == [0.0] * 4  # no <think> block: applies, scores 0
    assert scores["reward"] == [1.0, 0.0, 0.0, 0.0]


def test_trls_parametrised_soft_overlong_punishment_from_a_users_file(tmp_path):
    """`get_soft_overlong_punishment` builds a function; a user's file names the one it builds."""
    path = tmp_path / "my_rewards.py"
    path.write_text("from trl.rewards import get_soft_overlong_punishment\n\noverlong = get_soft_overlong_punishment(8, 4)\n")
    ids = [[1] * 3, [1] * 6, [1] * 9]  # under the soft limit, inside the 4-token cache, over the maximum
    scores = score([f"{path}:overlong"], None, ["p"] * 3, ["a", "b", "c"], ids)
    assert scores["reward"] == [0.0, -0.5, -1.0]
