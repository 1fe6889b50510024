"""Prompt sources with reward functions of their own: each function scores its sources' rows, the
top-level ones every other row (and the eval prompts), and a run's functions keep one weight and one name."""

import pytest

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.reward_plan import RewardPlan


def test_a_source_with_functions_of_its_own_is_scored_by_them_alone():
    plan = RewardPlan.of(["top.py:a"], [2.0], [("math", ["m.py:exact", "top.py:a"], None), ("chat", None, None)])
    assert plan.specs == ("top.py:a", "m.py:exact") and plan.weights == (2.0, 1.0)
    assert plan.specs_for("math") == ("m.py:exact", "top.py:a") and plan.specs_for("chat") == plan.specs_for(None) == (
        "top.py:a",
    )
    assert plan.rows_of(["chat", "math", None, "math"]) == {"top.py:a": [0, 1, 2, 3], "m.py:exact": [1, 3]}
    assert RewardPlan.of(["top.py:a"], None, [("chat", None, None)]).rows_of(["chat"]) is None  # every function, every row


def test_a_function_weighed_twice_or_two_of_one_name_are_refused_naming_them():
    with pytest.raises(
        ValueError, match=r"source 'math' weighs 'top.py:a' 3 and reward_funcs 1: a reward function has one weight"
    ):
        RewardPlan.of(["top.py:a"], None, [("math", ["top.py:a"], [3.0])])
    with pytest.raises(ValueError, match=r"reward_funcs names 'rm' twice"):
        RewardPlan.of(["models/rm"], None, [("math", ["other/rm"], None)])


def test_the_config_folds_the_sources_functions_in_and_refuses_rows_nothing_scores():
    two = [
        {"source": "builtin:search", "reward_funcs": ["builtin:search_call"]},
        {"source": "builtin:lookup", "reward_funcs": ["builtin:exact_code"]},
    ]
    config = TrainConfig(prompts=two)
    assert config.reward_funcs == [] and config.reward_plan.specs == ("builtin:search_call", "builtin:exact_code")
    with pytest.raises(ValueError, match=r"eval_prompts are scored by the top-level reward_funcs .*: set reward_funcs"):
        TrainConfig(prompts=two, eval_prompts="builtin:search")
    with pytest.raises(ValueError, match=r"reward_funcs is empty: .* \(source 'builtin_lookup' has none of its own\)"):
        TrainConfig(prompts=[two[0], {"source": "builtin:lookup"}], reward_funcs=[])
    with pytest.raises(ValueError, match=r"reward_weights has 2 entries but this source's reward_funcs has 1"):
        TrainConfig(prompts=[{**two[0], "reward_weights": [1.0, 2.0]}])
