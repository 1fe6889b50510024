"""The bench model: a ~20M-parameter Llama with random (seeded) weights and the tiny tokenizer.

Throughput does not depend on what the weights say, so no pre-training is needed; sampling uses
`ignore_eos` so every engine generates exactly the same number of tokens.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.builtin.tiny_model import cache_root, tiny_model


def bench_model(hidden: int = 512, layers: int = 6, heads: int = 8, seed: int = 0) -> Path:
    folder = cache_root() / f"bench-llama-h{hidden}-l{layers}-s{seed}"
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tiny = tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(tiny.tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=1024,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    LlamaForCausalLM(config).save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(folder)
    return folder


def parameter_count(folder: Path) -> int:
    import math

    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
