from orchestrator.rollout.kv_cache import MIN_BYTES, bytes_per_token, cpu_kv_cache_bytes

LLAMA = {"num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 512}


def test_sized_for_every_sample_at_full_length_in_whole_blocks():
    assert bytes_per_token(LLAMA) == 2 * 6 * 8 * 64 * 4
    # 64 samples x 140 tokens -> 2 blocks of 128 each, plus a spare block: 3 x 128 tokens per sample
    assert cpu_kv_cache_bytes(LLAMA, 64, 140) == 64 * 3 * 128 * bytes_per_token(LLAMA)


def test_small_work_keeps_the_floor_and_grouped_query_attention_counts_kv_heads():
    assert cpu_kv_cache_bytes(LLAMA, 1, 10) == MIN_BYTES
    assert bytes_per_token({**LLAMA, "num_key_value_heads": 2}) == bytes_per_token(LLAMA) // 4
