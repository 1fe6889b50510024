"""top_p below 1: the engines report log-probs of the truncated distribution they sampled from, the
learner computes them over the whole vocabulary, and the importance-sampling correction weighs each
token by their ratio, which is the nucleus' probability mass at that token: between top_p and 1."""

import math

import numpy as np
import pytest

from orchestrator.builtin import search_task
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.groups import make_groups
from orchestrator.rollout.samples import StepSamples
from orchestrator.training.advantages import group_advantages
from orchestrator.training.batch import learner_batch
from workers.learner.grpo import GRPOLearner

pytestmark = pytest.mark.engines

TOP_P = 0.9


def _first_update(learner, batch, micro_batch_size=None, max_tokens=None) -> dict:
    """What train_step does up to its first optimizer step: the round prepared, the gradient of its one
    part's loss accumulated in `.grad`; its metrics."""
    (part,), _ = learner.prepare_round(batch, micro_batch_size, max_tokens)
    return learner.accumulate_gradients(part)


def test_top_p_mismatch_is_bounded_and_the_ratio_is_the_nucleus_mass(pool, tiny, learner_tokenizer):
    prompts = search_task.prompts(8, seed=11)
    sampling = SamplingConfig(max_tokens=24, temperature=1.0, top_p=TOP_P, seed=5)
    requests = make_groups(prompts, [learner_tokenizer(p)["input_ids"] for p in prompts], 4, sampling)
    samples = StepSamples.assemble(requests, pool.generate(requests))
    config = TrainConfig(
        num_generations=4, prompts_per_step=8, max_steps=1, top_p=TOP_P, vllm_importance_sampling_mode="token_truncate"
    )
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    batch = learner_batch(samples, group_advantages(np.arange(32.0) % 3, samples.group_id), learner.tokenizer.pad_token_id)

    import torch

    inputs = {key: torch.tensor(value) for key, value in batch.items()}
    with torch.no_grad():
        learner_logps = learner._logps(learner.model, inputs).numpy()
    mask = batch["completion_mask"].astype(bool)
    log_ratio = (learner_logps - batch["sampling_per_token_logps"])[mask]
    # log(learner / engine) = log(the nucleus' mass), in [log top_p, 0], up to float32 rounding
    assert log_ratio.max() <= 1e-5
    assert log_ratio.min() >= math.log(TOP_P) - 1e-5
    assert (log_ratio < -1e-3).mean() > 0.05  # the nucleus left tokens out at some steps

    metrics = _first_update(learner, batch)
    assert metrics["sampling/sampling_logp_difference/max"] <= -math.log(TOP_P) + 1e-5
    assert TOP_P - 1e-5 <= metrics["sampling/importance_sampling_ratio/min"] < 1.0
    assert metrics["sampling/importance_sampling_ratio/max"] <= 1.0 + 1e-5
