"""A tiny reward model built here, with weights set by hand: it prefers short samples.

A GPT-2 sequence classifier (one label) over the tiny model's learner tokenizer, whose attention and
MLP outputs are zero, so the hidden state of a token is its embeddings alone: every token embedding is
the same vector u, and position p adds -(p / LENGTH_SCALE) v (u and v orthogonal). After the final
LayerNorm the score head reads the v component, so the reward of a sample whose last token is at
position p is exactly -t / sqrt(1 + t^2) with t = p / LENGTH_SCALE: 0 for one token, falling towards
-1 as the sample grows. TRL loads it like any reward model (`reward_funcs: [FOLDER]`).

    python -m orchestrator.builtin.tiny_reward_model      # build (or find) it and print its folder
"""

from __future__ import annotations

import math
from pathlib import Path

from orchestrator.builtin.tiny_model import cache_root, cached_build, tiny_model

LENGTH_SCALE = 64.0
HIDDEN = 16
MAX_POSITIONS = 2048
RECIPE_VERSION = 1
PROBE_TOKENS = 32  # the build checks its score of a sample this long


def short_preferring_reward_model() -> Path:
    """The model's folder (weights, config and tokenizer), built once and cached."""
    key = f"v{RECIPE_VERSION}-scale{LENGTH_SCALE:g}-hidden{HIDDEN}-positions{MAX_POSITIONS}"
    root = cache_root() / f"tiny-reward-model-short-{key}"
    cached_build(root, key, lambda staging: _build(staging / "model"))
    return root / "model"


def expected_reward(last_position: int) -> float:
    """The reward of a sample whose last token is at `last_position` (its length - 1)."""
    t = last_position / LENGTH_SCALE
    return -t / math.sqrt(1 + t * t)


def _build(folder: Path) -> None:
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2ForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tiny_model().tokenizer_dir)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=MAX_POSITIONS,
        n_embd=HIDDEN,
        n_layer=1,
        n_head=2,
        num_labels=1,
        pad_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2ForSequenceClassification(config)
    u, v = torch.zeros(HIDDEN), torch.zeros(HIDDEN)
    u[0], u[1] = 1.0, -1.0  # both of mean 0, so the LayerNorm only rescales
    v[2], v[3] = 1.0, -1.0
    with torch.no_grad():
        for module in (model.transformer.h[0].attn.c_proj, model.transformer.h[0].mlp.c_proj):
            module.weight.zero_()
            module.bias.zero_()
        model.transformer.wte.weight.copy_(u.expand_as(model.transformer.wte.weight))
        positions = torch.arange(MAX_POSITIONS, dtype=torch.float32)[:, None]
        model.transformer.wpe.weight.copy_(-(positions / LENGTH_SCALE) * v)
        # LayerNorm(u - t v) = (u - t v) / sqrt((2 + 2t^2) / HIDDEN); its v component is -2t / that.
        model.score.weight.copy_(v[None] / (2 * math.sqrt(HIDDEN / 2)))
        probe = torch.full((1, PROBE_TOKENS), tokenizer.eos_token_id + 1)  # any token but the pad (EOS)
        scores = model.eval()(probe, attention_mask=torch.ones_like(probe)).logits  # the last position's score
    scored, expected = float(scores[0, 0]), expected_reward(PROBE_TOKENS - 1)
    if abs(scored - expected) > 1e-4:  # LayerNorm's eps puts it ~1e-5 off; a wrong build is never cached
        raise RuntimeError(f"the built reward model scores {scored} for {PROBE_TOKENS} tokens, not {expected}")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


if __name__ == "__main__":
    print(short_preferring_reward_model())
