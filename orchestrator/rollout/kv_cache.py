"""How much KV cache an engine needs for the work it will be given.

vLLM's CPU backend cannot size its KV cache from free memory when engines share a machine, so it
is set explicitly. Too small is slow: vLLM preempts running sequences and computes them again. So the
pool sizes the cache for every sample it may hold in flight at full length. (A preempted request comes
back as one whole prefill: CPU engines never prefill in chunks, workers/rollout/engine.py says why.)

On a GPU vLLM would take `gpu_memory_utilization` of the device: for a small model on a large GPU that
is millions of blocks, which vLLM walks in Python at each weight load's cache reset (0.3-0.8 s a sync
instead of ~0.03 s, expected from a read of vLLM 0.32), and its start-up memory profile fails when a
colocated learner frees memory meanwhile. A KV size given explicitly skips that profile. So a GPU engine
is sized for its work too while that is at most `GPU_SIZED_MAX_BYTES`; past it vLLM sizes the cache,
except beside a colocated learner, where the profile would race the learner's steps: there the engine
holds the samples that fit `GPU_SIZED_MAX_BYTES` at once (`gpu_sequences_within`), and more wait.
"""

from __future__ import annotations

MIN_BYTES = 256 << 20
MAX_BYTES = 8 << 30
CPU_BLOCK_TOKENS = 128  # vLLM's CPU block size: every sequence holds whole blocks
GPU_BLOCK_TOKENS = 16  # vLLM's default block size on CUDA
GPU_SIZED_MAX_BYTES = 2 << 30  # small enough to fit beside the weights of any model a GPU serves


def bytes_per_token(model_config: dict, dtype_bytes: int = 4) -> int:
    """Key + value bytes one token takes across all layers."""
    text = model_config.get("text_config", model_config)
    heads = text.get("num_key_value_heads") or text["num_attention_heads"]
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    return 2 * text["num_hidden_layers"] * heads * head_dim * dtype_bytes


def cpu_kv_cache_bytes(model_config: dict, sequences: int, tokens_per_sequence: int) -> int:
    """Enough for `sequences` sequences of `tokens_per_sequence` tokens (whole blocks, plus one
    spare block each), within [256 MiB, 8 GiB]."""
    need = _need(model_config, sequences, tokens_per_sequence, CPU_BLOCK_TOKENS, 4)
    return max(MIN_BYTES, min(MAX_BYTES, need))


def gpu_kv_cache_bytes(
    model_config: dict, sequences: int, tokens_per_sequence: int, dtype: str | None, cap: int | None = GPU_SIZED_MAX_BYTES
) -> int | None:
    """A GPU engine's KV cache for the same work (at least 256 MiB), in the engines' `dtype` (None:
    vLLM's choice, 16-bit); None (vLLM sizes it) when that is over `cap`."""
    need = _need(model_config, sequences, tokens_per_sequence, GPU_BLOCK_TOKENS, 4 if dtype == "float32" else 2)
    return max(MIN_BYTES, need) if cap is None or need <= cap else None


def gpu_sequences_within(model_config: dict, tokens_per_sequence: int, dtype: str | None, budget: int) -> int:
    """How many sequences of `tokens_per_sequence` tokens a GPU KV cache of `budget` bytes holds (at least 1)."""
    one = _need(model_config, 1, tokens_per_sequence, GPU_BLOCK_TOKENS, 4 if dtype == "float32" else 2)
    return max(1, budget // one)


def _need(model_config: dict, sequences: int, tokens_per_sequence: int, block_tokens: int, dtype_bytes: int) -> int:
    blocks = -(-tokens_per_sequence // block_tokens) + 1
    return sequences * blocks * block_tokens * bytes_per_token(model_config, dtype_bytes)
