"""The learner's GRPO step through TRL, on the tiny model, without Ray."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from orchestrator.config.train import TrainConfig
from orchestrator.training.advantages import group_advantages
from orchestrator.training.batch import learner_batch
from workers.learner.grpo import GRPOLearner


@pytest.fixture(scope="module")
def learner(tiny):
    config = TrainConfig(num_generations=2, prompts_per_step=2, learning_rate=1e-2, temperature=1.5, max_steps=5)
    return GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))


def _batch(learner, temperature=1.5):
    """Two groups of two samples, with behaviour logprobs computed from the learner's own model."""
    tok = learner.tokenizer
    prompt = tok("Q: what is apple ? A:")["input_ids"]
    completions = [tok(" <search> apple </search>")["input_ids"] + [tok.eos_token_id], tok(" apple")["input_ids"]]
    rows = {"prompt_ids": [prompt] * 4, "completion_ids": completions * 2, "logprobs": []}
    model = learner.trainer.accelerator.unwrap_model(learner.model)
    for completion in rows["completion_ids"]:
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1] / temperature
        rows["logprobs"].append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist())
    table = pa.table(rows)
    advantages = group_advantages(np.array([1.0, 0.0, 1.0, 0.0]), np.array([0, 0, 1, 1]))
    return learner_batch(table, advantages, tok.pad_token_id)


def test_step_uses_trl_loss_and_matches_behaviour_logprobs(learner):
    before = {k: v.clone() for k, v in learner.named_weights()}
    metrics = learner.train_step(_batch(learner))
    assert metrics["rollout/logprob_abs_diff"] < 1e-4  # same weights, temperature applied on both sides
    assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    assert learner.policy_version == 1
    after = dict(learner.named_weights())
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_observation_tokens_are_left_out_of_the_logprob_check(learner):
    batch = _batch(learner)
    batch["old_per_token_logps"][0, 1:3] = -50.0  # tokens 1-2 of row 0 played the part of a tool's result
    batch["tool_mask"] = np.ones_like(batch["completion_mask"])
    batch["tool_mask"][0, 1:3] = 0
    assert learner.train_step(batch)["rollout/logprob_abs_diff"] < 1e-4


def test_rewarded_completion_becomes_more_likely(learner):
    def call_logp():  # summed logprob of the rewarded completion (row 0) under the current weights
        batch = _batch(learner)
        return float((batch["old_per_token_logps"][0] * batch["completion_mask"][0]).sum())

    start = call_logp()
    for _ in range(3):
        learner.train_step(_batch(learner))
    assert call_logp() > start


def test_weight_buckets_cover_every_weight(learner):
    buckets = learner.weight_buckets(bucket_bytes=64 << 10)
    names = [entry.name for bucket in buckets for entry in bucket.entries]
    assert names == [name for name, _ in learner.named_weights()]
    assert len(buckets) > 1


def test_kl_term_against_the_reference_model(tiny):
    config = TrainConfig(num_generations=2, prompts_per_step=2, learning_rate=1e-2, temperature=1.5, max_steps=3, beta=0.1)
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    first = learner.train_step(_batch(learner))
    assert first["rollout/logprob_abs_diff"] < 1e-4 and np.isfinite(first["loss"])
    second = learner.train_step(_batch(learner))
    assert np.isfinite(second["loss"])
