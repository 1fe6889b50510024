"""Batches of whole GRPO steps for the learner tests that compare one learner with several ranks."""

from __future__ import annotations

import numpy as np
import torch

from orchestrator.rollout.samples import StepSamples
from orchestrator.training.advantages import group_advantages
from orchestrator.training.batch import learner_batch


def grpo_steps(tiny, steps: int, groups: int, group_size: int, temperature: float) -> list[tuple[dict, np.ndarray]]:
    """(batch, each row's group id) for `steps` steps of `groups` groups, with prompts and completions of
    different lengths and behaviour logprobs near the starting model's own (a little noise, so the
    importance-sampling ratio departs from 1)."""
    from transformers import AutoModelForCausalLM

    from workers.learner.model_setup import load_tokenizer

    tokenizer = load_tokenizer(str(tiny.tokenizer_dir), [], warn=False)
    model = AutoModelForCausalLM.from_pretrained(tiny.model_dir)
    rng = np.random.default_rng(0)
    vocab = model.get_input_embeddings().weight.shape[0]
    rows = groups * group_size
    result = []
    for _ in range(steps):
        prompts = [rng.integers(3, vocab, size=rng.integers(2, 7)).tolist() for _ in range(rows)]
        completions = [rng.integers(3, vocab, size=rng.integers(1, 13)).tolist() for _ in range(rows)]
        logprobs = []
        for prompt, completion in zip(prompts, completions):
            with torch.no_grad():
                logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1] / temperature
            exact = torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
            logprobs.append((exact.numpy() + rng.normal(scale=0.1, size=len(completion))).tolist())
        group_ids = np.arange(rows) // group_size
        samples = StepSamples.from_tokens(prompts, completions, logprobs)
        advantages = group_advantages(rng.random(rows), group_ids)
        result.append((learner_batch(samples, advantages, tokenizer.pad_token_id), group_ids))
    return result
