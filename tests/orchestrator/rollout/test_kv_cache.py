from orchestrator.rollout.kv_cache import MIN_BYTES, bytes_per_token, cpu_kv_cache_bytes, gpu_kv_cache_bytes

LLAMA = {"num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 512}


def test_sized_for_every_sample_at_full_length_in_whole_blocks():
    assert bytes_per_token(LLAMA) == 2 * 6 * 8 * 64 * 4
    # 64 samples x 140 tokens -> 2 blocks of 128 each, plus a spare block: 3 x 128 tokens per sample
    assert cpu_kv_cache_bytes(LLAMA, 64, 140) == 64 * 3 * 128 * bytes_per_token(LLAMA)


def test_small_work_keeps_the_floor_and_grouped_query_attention_counts_kv_heads():
    assert cpu_kv_cache_bytes(LLAMA, 1, 10) == MIN_BYTES
    assert bytes_per_token({**LLAMA, "num_key_value_heads": 2}) == bytes_per_token(LLAMA) // 4


def _group(learner_tokenizer, device, colocation=None, **rollout):
    from types import SimpleNamespace

    from orchestrator.contracts.rollout import RolloutConfig
    from orchestrator.rollout.fleet import EngineFleet

    # cpu_threads_bind set: the group does not look for the cluster's cores (no Ray here)
    config = RolloutConfig(cpu_threads_bind="nobind", **rollout)
    return EngineFleet(SimpleNamespace(device=device), None, learner_tokenizer, config, colocation=colocation)


def test_engines_take_the_runs_context_not_the_models_32k(learner_tokenizer):
    qwen = {**LLAMA, "max_position_embeddings": 32768}
    engines = _group(learner_tokenizer, "cpu")
    engines.size_for(qwen, samples_in_flight=64, tokens_per_sample=600)
    assert engines.config.max_model_len == 600
    assert engines.config.kv_cache_memory_bytes == cpu_kv_cache_bytes(qwen, 64, 600)
    on_gpu = _group(learner_tokenizer, "cuda")
    on_gpu.size_for(qwen, 64, 600)
    assert on_gpu.config.max_model_len == 600
    short = _group(learner_tokenizer, "cpu")
    short.size_for({**LLAMA, "max_position_embeddings": 256}, 64, 600)
    assert short.config.max_model_len == 256  # never more than the model's (preflight refuses prompts that need more)


def test_a_context_the_user_set_wins_and_gets_room_for_one_whole_sequence(learner_tokenizer):
    engines = _group(learner_tokenizer, "cpu", max_model_len=32768)
    engines.size_for({**LLAMA, "max_position_embeddings": 32768}, samples_in_flight=2, tokens_per_sample=100)
    assert engines.config.max_model_len == 32768
    assert engines.config.kv_cache_memory_bytes == cpu_kv_cache_bytes(LLAMA, 1, 32768) > MIN_BYTES


def test_a_gpu_engine_of_a_small_run_is_sized_for_its_work_and_a_large_one_left_to_vllm(learner_tokenizer):
    """vLLM's own sizing takes most of the GPU: millions of blocks for a small model, walked at every weight
    load, and a start-up profile that a colocated learner's freed memory breaks. Sized explicitly, neither."""
    on_gpu = _group(learner_tokenizer, "cuda")
    on_gpu.size_for(LLAMA, samples_in_flight=64, tokens_per_sample=600)
    # 16-token blocks of 16-bit keys and values (vLLM's choice of dtype on a GPU), at least 256 MiB
    need = 64 * (-(-600 // 16) + 1) * 16 * bytes_per_token(LLAMA, 2)
    assert on_gpu.config.kv_cache_memory_bytes == max(MIN_BYTES, need) == gpu_kv_cache_bytes(LLAMA, 64, 600, None)
    fp32 = _group(learner_tokenizer, "cuda", dtype="float32")
    fp32.size_for({**LLAMA, "num_hidden_layers": 8}, 64, 600)
    assert fp32.config.kv_cache_memory_bytes == 64 * 39 * 16 * bytes_per_token({**LLAMA, "num_hidden_layers": 8}, 4)
    large = _group(learner_tokenizer, "cuda", max_inflight_samples=256)
    large.size_for({**LLAMA, "num_hidden_layers": 80, "num_attention_heads": 64, "hidden_size": 8192}, 256, 4096)
    assert large.config.kv_cache_memory_bytes is None  # tens of GiB: vLLM sizes it from gpu_memory_utilization
    mine = _group(learner_tokenizer, "cuda", kv_cache_memory_bytes=3 << 30)
    mine.size_for(LLAMA, 64, 600)
    assert mine.config.kv_cache_memory_bytes == 3 << 30  # the user's own value wins


def test_beside_a_colocated_learner_a_gpu_engine_is_never_left_to_vllms_start_up_profile(learner_tokenizer):
    """vLLM's profile fails when another process frees GPU memory while it runs, as a colocated learner's step does:
    an engine (re)started beside one gets an explicit cache, holding at once the samples a small cache fits."""
    from types import SimpleNamespace

    from orchestrator.rollout.kv_cache import GPU_SIZED_MAX_BYTES

    big = {**LLAMA, "num_hidden_layers": 80, "num_attention_heads": 64, "hidden_size": 8192}
    colocated = _group(learner_tokenizer, "cuda", colocation=SimpleNamespace(share=0.3), max_inflight_samples=256)
    colocated.size_for(big, 256, 4096)
    one = (4096 // 16 + 1) * 16 * bytes_per_token(big, 2)  # 16-bit keys and values, whole blocks plus a spare
    assert colocated.config.max_inflight_samples == GPU_SIZED_MAX_BYTES // one
    assert colocated.config.kv_cache_memory_bytes == colocated.config.max_inflight_samples * one <= GPU_SIZED_MAX_BYTES
    huge = _group(learner_tokenizer, "cuda", colocation=SimpleNamespace(share=0.3))
    huge.size_for({**big, "num_hidden_layers": 800}, 64, 32768)  # one sequence is past the small cache: room for one
    assert huge.config.max_inflight_samples == 1
    assert huge.config.kv_cache_memory_bytes == (32768 // 16 + 1) * 16 * bytes_per_token({**big, "num_hidden_layers": 800}, 2)
