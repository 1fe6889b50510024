"""How much KV cache a CPU engine needs for the work it will be given.

vLLM's CPU backend cannot size its KV cache from free memory when engines share a machine, so it
is set explicitly. Too small is slow: vLLM preempts running sequences and computes them again. So the
pool sizes the cache for every sample it may hold in flight at full length. (A preempted request comes
back as one whole prefill: CPU engines never prefill in chunks, workers/rollout/engine.py says why.)
"""

from __future__ import annotations

MIN_BYTES = 256 << 20
MAX_BYTES = 8 << 30
CPU_BLOCK_TOKENS = 128  # vLLM's CPU block size: every sequence holds whole blocks


def bytes_per_token(model_config: dict, dtype_bytes: int = 4) -> int:
    """Key + value bytes one token takes across all layers."""
    text = model_config.get("text_config", model_config)
    heads = text.get("num_key_value_heads") or text["num_attention_heads"]
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    return 2 * text["num_hidden_layers"] * heads * head_dim * dtype_bytes


def cpu_kv_cache_bytes(model_config: dict, sequences: int, tokens_per_sequence: int) -> int:
    """Enough for `sequences` sequences of `tokens_per_sequence` tokens (whole blocks, plus one
    spare block each), within [256 MiB, 8 GiB]."""
    blocks = -(-tokens_per_sequence // CPU_BLOCK_TOKENS) + 1
    need = sequences * blocks * CPU_BLOCK_TOKENS * bytes_per_token(model_config)
    return max(MIN_BYTES, min(MAX_BYTES, need))
