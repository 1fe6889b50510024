import pytest

from orchestrator.config.train import TrainConfig


def test_one_learner_worker_by_default():
    assert TrainConfig().learner.workers == 1


def test_more_learner_workers_than_groups_is_refused_naming_both_keys():
    with pytest.raises(ValueError, match=r"learner.workers \(5\) is more than prompts_per_step \(4\)"):
        TrainConfig(prompts_per_step=4, learner={"workers": 5})
    assert TrainConfig(prompts_per_step=4, learner={"workers": 4}).learner.workers == 4
