"""The bench models: a ~20M-parameter Llama with random (seeded) weights and the tiny tokenizer.

Throughput does not depend on what the weights say, so no pre-training is needed. Two variants:
- fixed length: sampling uses `ignore_eos`, so every sample generates exactly `max_tokens` tokens;
- stops at EOS (`mean_length=N`): the weights are edited so that EOS has a chance of about 1/N at
  every position, so completions end at EOS with varied lengths (geometric, mean about N), as
  real completions do. One residual channel is held constant through every layer (every token's
  embedding sets it, no layer writes to it) and only EOS reads it in the output layer: a bias on
  EOS alone, calibrated on the model's own hidden states.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.builtin.tiny_model import cache_root, tiny_model


def bench_model(hidden: int = 512, layers: int = 6, heads: int = 8, seed: int = 0, mean_length: int | None = None) -> Path:
    suffix = f"-eos{mean_length}" if mean_length else ""
    folder = cache_root() / f"bench-llama-h{hidden}-l{layers}-s{seed}{suffix}"
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tiny = tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(tiny.tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if mean_length:
        _end_at_eos(model, tokenizer.eos_token_id, mean_length, seed)
    _publish(folder, model, tokenizer)
    return folder


QWEN_VOCAB = 151_936  # rows of Qwen2.5's embedding and output layer


def wide_vocab_model(vocab_size: int = QWEN_VOCAB, hidden: int = 128, layers: int = 2, seed: int = 0) -> Path:
    """A small Qwen2-architecture model (tied embeddings, random seeded weights) with a real model's
    vocabulary width, and the tiny tokenizer (whose ids are the first rows): the learner's memory
    for the logits of a 152k vocabulary, without a real model's layers."""
    folder = cache_root() / f"bench-qwen2-v{vocab_size}-h{hidden}-l{layers}-s{seed}"
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model().tokenizer_dir)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    _publish(folder, Qwen2ForCausalLM(config), tokenizer)
    return folder


def real_size_model(seed: int = 0) -> Path:
    """Qwen2.5-0.5B's architecture at full size (494M parameters: 24 layers, hidden 896, 151,936-row
    tied embeddings), random seeded weights saved in bfloat16 as the real checkpoint is, and the tiny
    tokenizer (whose ids are the first rows): real-size memory and weight sync without a download."""
    folder = cache_root() / f"bench-qwen2.5-0.5b-arch-s{seed}"
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model().tokenizer_dir)
    config = Qwen2Config(
        vocab_size=QWEN_VOCAB,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    _publish(folder, Qwen2ForCausalLM(config).to(torch.bfloat16), tokenizer)
    return folder


def _publish(folder: Path, model, tokenizer) -> None:
    """Written whole to a staging folder, then renamed: a build cut short never looks finished."""
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(folder)


def _end_at_eos(model, eos_token_id: int, mean_length: int, seed: int) -> None:
    """Give EOS a probability of about 1/mean_length at every position (see the module docstring)."""
    import torch

    channel = model.config.hidden_size - 1
    with torch.no_grad():
        model.model.embed_tokens.weight[:, channel] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[channel, :] = 0.0
            layer.mlp.down_proj.weight[channel, :] = 0.0
        head = model.lm_head.weight
        head[:, channel] = 0.0
        probe = torch.randint(1, model.config.vocab_size, (8, 64), generator=torch.Generator().manual_seed(seed))
        hidden = model.model(input_ids=probe).last_hidden_state  # after the final norm
        target = torch.logit(torch.tensor(1.0 / mean_length))
        for _ in range(5):  # Newton-free fixed point: shift the EOS logit by the log-odds still missing
            probability = torch.softmax(hidden @ head.T, dim=-1)[..., eos_token_id].mean()
            head[eos_token_id, channel] += (target - torch.logit(probability)) / hidden[..., channel].mean()


def parameter_count(folder: Path) -> int:
    import math

    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
