"""What `train` says at start-up about the run's precision: engines that sample in another dtype than
the learner trains in, with the importance-sampling correction off, are named once (with it on, the
ratio metrics show the mismatch, and it is corrected)."""

from orchestrator.launch import dtype_warning


def test_uncorrected_bf16_engines_beside_a_float32_learner_are_named_once():
    warning = dtype_warning("cuda", "auto", learner_bf16=False, corrected=False)
    assert "bfloat16 (vLLM's 'auto' on GPU) while the learner trains in float32" in warning
    assert "vllm_importance_sampling_correction: true" in warning and "rollout.dtype: float32" in warning
    assert dtype_warning("cuda", "float16", False, corrected=False).startswith("the engines sample in float16")
    assert "while the learner trains in bfloat16" in dtype_warning("cuda", "float16", True, corrected=False)
    assert "bfloat16 while" in dtype_warning("cpu", "bfloat16", False, corrected=False)


def test_matching_precisions_and_corrected_runs_say_nothing():
    assert dtype_warning("cpu", "auto", learner_bf16=False, corrected=False) is None  # float32 engines on CPU
    assert dtype_warning("cuda", "float32", learner_bf16=False, corrected=False) is None
    assert dtype_warning("cuda", "auto", learner_bf16=True, corrected=False) is None
    assert dtype_warning("cuda", "auto", learner_bf16=False, corrected=True) is None
