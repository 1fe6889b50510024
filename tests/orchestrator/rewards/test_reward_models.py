"""Reward models in reward_funcs (TRL's convention): told apart from functions, refused before anything
starts when TRL's convention cannot score them, and scored in a step by the reward-model workers, also
when a worker dies mid-batch."""

import json
import shutil

import pytest
import ray

from orchestrator.builtin.tiny_reward_model import expected_reward, short_preferring_reward_model
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.reward_models import is_model, reward_name
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rewards import models
from orchestrator.rewards.functions import RewardModelLostError
from orchestrator.rewards.scoring import RewardScorer


def test_an_entry_with_no_function_name_is_a_model_named_as_trl_names_it():
    assert reward_name("org/reward-model") == "reward-model" and reward_name("/data/rm/") == "rm"
    assert reward_name("rewards.py:fn") == "rewards.py:fn"
    assert is_model("org/reward-model") and is_model("/data/rm") and is_model("./rm")
    assert not is_model("builtin:search_call") and not is_model("rewards.py:fn") and not is_model("pkg.mod:fn")
    assert not is_model("rewards.py")  # a file without its function: the function resolver says what is missing


def _config(spec: str, **settings) -> TrainConfig:
    return TrainConfig(reward_funcs=["builtin:search_call", spec], **settings)


def test_what_trls_convention_cannot_score_is_refused_naming_the_key(tiny, tmp_path):
    with pytest.raises(UserError, match=r"reward_funcs\[1\]: '/nowhere/rm' is neither a reward function"):
        models.check(_config("/nowhere/rm"), conversational=False, sample_tokens=100)
    with pytest.raises(UserError, match=r"reward_funcs\[1\]: .* is a LlamaForCausalLM, not a sequence classifier"):
        models.check(_config(str(tiny.model_dir)), conversational=False, sample_tokens=100)
    two_labels = tmp_path / "two-labels"
    shutil.copytree(short_preferring_reward_model(), two_labels)
    config = json.loads((two_labels / "config.json").read_text())
    config["id2label"] = {"0": "bad", "1": "good"}
    (two_labels / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=r"reward_funcs\[1\]: .* has 2 labels; a reward model has one"):
        models.check(_config(str(two_labels)), conversational=False, sample_tokens=100)
    rm = str(short_preferring_reward_model())
    models.check(_config(rm), conversational=False, sample_tokens=100)
    with pytest.raises(UserError, match=r"reward_funcs\[1\]: the prompts are conversations, .* has none"):
        models.check(_config(rm), conversational=True, sample_tokens=100)
    with pytest.raises(UserError, match=r"reward_processing_classes\[1\]: no tokenizer loads from '/nowhere/tok'"):
        models.check(_config(rm, reward_processing_classes=[None, "/nowhere/tok"]), conversational=False, sample_tokens=100)
    short = tmp_path / "short-context"
    shutil.copytree(short_preferring_reward_model(), short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "n_positions": 64}))  # GPT-2's name for max_position_embeddings
    with pytest.raises(
        UserError,
        match=r"reward_funcs\[1\]: .* reads at most 64 positions, and a sample of this run takes up to 100 tokens \(its "
        r"longest prompt and max_completion_length, in the policy's tokens\)",
    ):
        models.check(_config(str(short)), conversational=False, sample_tokens=100)
    models.check(_config(str(short)), conversational=False, sample_tokens=64)
    with pytest.raises(ValueError, match="reward_processing_classes has 1 entries but reward_funcs has 2"):
        _config(rm, reward_processing_classes=[None])
    with pytest.raises(ValueError, match="reward_funcs names 'model' twice"):  # two folders called model
        TrainConfig(reward_funcs=[rm, str(two_labels / ".." / "other" / "model")])


def _groups(prompt: str, completions: list[list[str]]):
    requests, results = [], []
    for group_id, texts in enumerate(completions):
        requests.append(GroupRequest(group_id, 0, prompt, [1], len(texts), SamplingConfig()))
        samples = [Sample(i, text, [1], [0.0], "stop", None, None) for i, text in enumerate(texts)]
        results.append(GroupResult(group_id, 0, 0, samples))
    return requests, results


def _score(config, group, requests, results) -> dict:
    scorer = RewardScorer(config.reward_funcs, config.reward_weights, config.reward_error_score, reward_models=group.workers)
    rewards = scorer.begin(requests)
    for result in results:
        rewards.add(result)
    return rewards.close().scores()


def test_a_step_is_scored_by_the_workers_and_a_worker_killed_mid_batch_rescores_it(ray_session):
    rm = str(short_preferring_reward_model())
    config = _config(rm, reward_weights=[0.0, 1.0], reward_models={"workers": 2, "num_cpus": 0})
    servers = models.RewardModelServers.start(config, timeout_s=120)
    try:
        prompt = "Q: what is apple ? A:"
        requests, results = _groups(prompt, [[" apple", " <search> apple </search>"], [" a b c d e f g h", " x"]])
        scores = _score(config, servers, requests, results)
        expected = _expected(rm, [prompt + s.completion for result in results for s in result.samples])
        assert scores["rewards/model"] == pytest.approx(expected, abs=1e-4)
        assert scores["reward"] == pytest.approx(expected, abs=1e-4)  # weights 0 and 1

        completions = [" a", " b", " c", " d"]
        pending = servers.workers[0].score.remote(rm, [prompt] * 4, completions)
        ray.kill(servers.workers[0], no_restart=False)  # dies with the call in flight; Ray restarts it
        assert ray.get(pending, timeout=120) == pytest.approx(_expected(rm, [prompt + c for c in completions]), abs=1e-4)
        assert _score(config, servers, requests, results)["rewards/model"] == pytest.approx(expected, abs=1e-4)

        ray.kill(servers.workers[1], no_restart=True)  # gone for good: the run stops, whatever reward_error_score says
        with pytest.raises(RewardModelLostError, match=r"reward model '.*model': a worker died past reward_models.max_restarts"):
            _score(config.model_copy(update={"reward_error_score": -1.0}), servers, requests, results)
    finally:
        servers.shutdown()


def _expected(rm: str, texts: list[str]) -> list[float]:
    """The built model's reward for each text: its reward model's tokenizer counts the positions."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rm)
    return [expected_reward(len(tokenizer(text, add_special_tokens=False)["input_ids"]) - 1) for text in texts]
