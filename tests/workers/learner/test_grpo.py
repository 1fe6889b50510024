"""The learner's GRPO step through TRL, on the tiny model, without Ray."""

import numpy as np
import pytest
import torch

from orchestrator.config.train import TrainConfig
from orchestrator.rollout.samples import StepSamples
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
    samples = StepSamples.from_tokens(rows["prompt_ids"], rows["completion_ids"], rows["logprobs"])
    advantages = group_advantages(np.array([1.0, 0.0, 1.0, 0.0]), np.array([0, 0, 1, 1]))
    return learner_batch(samples, advantages, tok.pad_token_id)


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
    from workers.weights.buckets import pack

    buckets = pack(learner.named_weights(), bucket_bytes=64 << 10)  # what the learner actor publishes
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


def _uneven_batch(learner, rows=10, seed=0):
    """`rows` samples of different prompt and completion lengths (groups of two), with behaviour
    logprobs a little off the learner's own so the importance ratio is clipped on some tokens."""
    rng = np.random.default_rng(seed)
    vocab = len(learner.tokenizer)
    prompts = [rng.integers(3, vocab, size=rng.integers(2, 7)).tolist() for _ in range(rows)]
    completions = [rng.integers(3, vocab, size=rng.integers(1, 13)).tolist() for _ in range(rows)]
    samples = StepSamples.from_tokens(prompts, completions, [[0.0] * len(c) for c in completions])
    advantages = group_advantages(rng.random(rows), np.arange(rows) // 2)
    batch = learner_batch(samples, advantages, learner.tokenizer.pad_token_id)
    inputs = {key: torch.tensor(value) for key, value in batch.items()}
    with torch.no_grad():
        logps = learner._logps(learner.model, inputs).numpy()
    noise = rng.normal(scale=0.3, size=logps.shape).astype(np.float32)
    batch["old_per_token_logps"] = (logps + noise) * batch["completion_mask"]
    return batch


def _gradients(learner, batch, micro_batch_size):
    metrics = learner.accumulate_gradients(batch, micro_batch_size)
    grads = {name: p.grad.clone() for name, p in learner.model.named_parameters() if p.grad is not None}
    learner.optimizer.zero_grad(set_to_none=True)
    return metrics, grads


@pytest.mark.parametrize(
    "loss_type,beta",
    [("dapo", 0.0), ("grpo", 0.0), ("bnpo", 0.0), ("dr_grpo", 0.0), ("cispo", 0.0), ("sapo", 0.0), ("dapo", 0.1)],
)
def test_micro_batches_give_the_gradient_and_loss_of_the_whole_step(tiny, loss_type, beta):
    config = TrainConfig(num_generations=2, prompts_per_step=5, max_steps=1, loss_type=loss_type, beta=beta)
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    batch = _uneven_batch(learner)  # 10 samples: micro-batches of 4, 4 and 2
    whole, whole_grads = _gradients(learner, batch, None)
    split, split_grads = _gradients(learner, batch, 4)
    assert whole_grads.keys() == split_grads.keys() and whole_grads
    worst = max(float((whole_grads[name] - split_grads[name]).abs().max()) for name in whole_grads)
    assert worst <= 1e-5
    assert split["loss"] == pytest.approx(whole["loss"], abs=1e-6) and whole["loss"] != 0.0
    assert split["rollout/logprob_abs_diff"] == pytest.approx(whole["rollout/logprob_abs_diff"], abs=1e-6)
    assert split["rollout/logprob_max_abs_diff"] == pytest.approx(whole["rollout/logprob_max_abs_diff"], abs=1e-6)


def test_micro_batch_size_from_the_config_drives_the_step(tiny):
    config = TrainConfig(num_generations=2, prompts_per_step=5, max_steps=2, learner={"micro_batch_size": 3})
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    metrics = learner.train_step(_uneven_batch(learner))
    assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0 and learner.policy_version == 1
