"""What `train` says at start-up about the run's precision: GPU engines in vLLM's 'auto' dtype sample in
bfloat16 while a float32 learner trains, and the user is told so once (the CPU runs stay exact)."""

from orchestrator.launch import dtype_warning


def test_bf16_engines_beside_a_float32_learner_are_named_once():
    warning = dtype_warning("cuda", "auto", learner_bf16=False)
    assert "bfloat16 (vLLM's 'auto' on GPU) while the learner trains in float32" in warning
    assert "rollout.dtype: float32" in warning
    assert dtype_warning("cuda", "float16", learner_bf16=False).startswith("the engines sample in float16")
    assert "while the learner trains in bfloat16" in dtype_warning("cuda", "float16", learner_bf16=True)


def test_matching_precisions_and_cpu_runs_say_nothing():
    assert dtype_warning("cpu", "auto", learner_bf16=False) is None  # float32 engines on CPU
    assert dtype_warning("cuda", "float32", learner_bf16=False) is None
    assert dtype_warning("cuda", "auto", learner_bf16=True) is None


def test_the_cpu_suites_ray_session_keeps_engines_and_learners_on_the_cpu(ray_session):
    """On a GPU machine (`make test DEVICE=gpu`) the CPU suite's fixtures must not put their engines on
    GPUs in bf16: its Ray session advertises none, and only tests marked `gpu` start clusters with GPUs."""
    import ray

    assert ray_session.device == "cpu"
    assert ray.cluster_resources().get("GPU", 0) == 0
