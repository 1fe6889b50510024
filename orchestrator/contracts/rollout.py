"""The rollout pool: how many vLLM engines, and how each one is built."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestrator.contracts.strict import StrictModel


class AutoscaleSettings(StrictModel):
    """`rollout.autoscale`: the pool sizes itself from what each step measured (orchestrator/rollout/autoscale.py)."""

    min_engines: int = Field(1, ge=1, description="Fewest engines the pool shrinks to.")
    max_engines: int = Field(4, ge=1, description="Most engines the pool grows to.")
    grow_above: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="Grow when the learner waited for generation more than this share of a step (time/generate / "
        "time/step, averaged over window_steps).",
    )
    shrink_below: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="Shrink when the learner waited less than this share of a step: generation keeps ahead with "
        "fewer engines. Between shrink_below and grow_above the pool holds (the hysteresis band).",
    )
    window_steps: int = Field(3, ge=1, description="Steps averaged for a decision.")
    cooldown_steps: int = Field(
        3, ge=0, description="Steps after a resize before the next decision: the new engines start and the window refills."
    )
    min_gain: float = Field(
        0.1,
        ge=0.0,
        description="A growth must raise generation throughput (completion tokens per second of generation) by this share; "
        "one that did not is undone, and the pool grows no further than the size before it for retry_growth_steps.",
    )
    retry_growth_steps: int | None = Field(
        50,
        ge=1,
        description="Steps after a growth that did not pay before growth past that size may be tried again (what limited "
        "it, a busy machine or short completions, may have changed). null: never.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> AutoscaleSettings:
        if self.min_engines > self.max_engines:
            raise ValueError(f"min_engines ({self.min_engines}) is above max_engines ({self.max_engines})")
        if self.shrink_below >= self.grow_above:
            raise ValueError(f"shrink_below ({self.shrink_below}) must be below grow_above ({self.grow_above})")
        return self


class RolloutConfig(StrictModel):
    engines: int = Field(1, ge=1, description="Number of vLLM engines (one Ray actor each).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Engine weight dtype. 'auto': float32 on CPU (exact logprobs); on GPU vLLM's own choice, bfloat16 "
        "for a float32 or bfloat16 checkpoint, so engines sample in bf16 while a float32 learner trains: the "
        "importance-sampling correction (vllm_importance_sampling_correction) weighs the mismatch, and "
        "sampling/sampling_logp_difference/mean shows it. float32 engines match a float32 learner on CPU (~3e-7); on GPU "
        "they start with TRITON_F32_DEFAULT=ieee so that attention is float32 too (expected close, not yet measured).",
    )
    max_model_len: int | None = Field(None, ge=16, description="Prompt + completion limit; default from the model.")
    kv_cache_memory_bytes: int | None = Field(
        None,
        ge=1 << 20,
        description="KV cache size per engine. Default: enough for max_inflight_samples at full length (at least 256 "
        "MiB); on GPU only while that is at most 2 GiB, else vLLM's own sizing from gpu_memory_utilization "
        "(orchestrator/rollout/kv_cache.py).",
    )
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0, description="GPU only: vLLM memory share.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per engine.")
    vllm_v1_runner: bool = Field(
        False,
        description="GPU only: run vLLM's V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0) instead of the V2 runner vLLM "
        "0.32 picks on CUDA. The CPU engines this project is tested on run V1: the first thing to try when a CUDA "
        "engine fails with a traceback inside vLLM's V2 runner (vllm/v1/worker/gpu/).",
    )
    max_inflight_samples: int = Field(
        256, ge=1, description="Samples one engine generates at a time (vLLM's max_num_seqs; the CPU KV cache is sized for it)."
    )
    max_queued_samples: int | None = Field(
        None,
        ge=0,
        description="Samples an engine holds queued behind those it generates, started the moment a group ends rather "
        "than a driver round trip later; more groups wait on the driver. null: as many as max_inflight_samples. 0: the "
        "driver holds every group an engine is not generating (a slow engine then hoards nothing).",
    )
    engine_calls_per_s: float = Field(
        200.0,
        gt=0.0,
        description="Sets how long an engine lingers to hand finished groups back together: engines / "
        "engine_calls_per_s seconds after the first (at once when it holds nothing else, or when half its queue has "
        "started while the driver has more groups), so the driver's calls per group fall as engines are added.",
    )
    enforce_eager: bool | None = Field(
        None,
        description="vLLM's enforce_eager: true runs the model eagerly, false compiles it with torch.compile (and "
        "captures CUDA graphs on GPU) when the engine starts. null: true on CPU, false on GPU. On CPU, compiling "
        "makes each engine start (and each replacement) take tens of seconds longer for somewhat faster "
        "generation: worth it for long runs only.",
    )
    num_cpus_per_engine: float = Field(1.0, ge=0.0, description="Ray CPUs reserved for each engine actor.")
    cpu_threads_bind: str | None = Field(
        None,
        description="CPU engines: the cores an engine's threads run on, as vLLM's VLLM_CPU_OMP_THREADS_BIND takes them "
        "('0-3', 'auto', 'nobind'). null: on a one-node cluster, the node's cores split evenly among the engines (one "
        "engine on 2 cores gets both; vLLM alone would keep one for its scheduler, and bind every engine to the "
        "same core), and in async mode only the half of them that the learner does not get (learner.torch_threads); "
        "on a multi-node cluster, vLLM's own choice.",
    )
    startup_timeout_s: float = Field(600.0, gt=0.0, description="Deadline for an engine to start and report.")
    kv_cache_after_update: Literal["recompute", "keep"] = Field(
        "recompute",
        description="What a weight update does to the KV cache of requests in flight (async runs, where updates land "
        "mid-completion). recompute: clear it; each request's context is prefilled again under the new weights. keep: "
        "keep it; the tokens after the update attend to keys and values the old weights computed (no re-prefill). "
        "Either way a request that starts after an update never reuses a prefix cached under older weights (each "
        "version salts the prefix cache).",
    )
    continuation: bool = Field(
        True,
        description="An engine that stops serving while it generates (its node is draining, the pool shrinks) hands its "
        "running groups back at once, each sample with its tokens, log-probs and versions so far, and other engines "
        "continue them from their last token (no token is generated twice, and a drain's notice need not outlast a "
        "completion). false: such an engine finishes the groups it began before it stops.",
    )
    request_timeout_s: float = Field(
        1800.0, gt=0.0, description="Deadline for one group's generation; an engine that misses it is replaced."
    )
    health_check_interval_s: float = Field(
        5.0,
        ge=0.0,
        description="While generating, an engine that has held groups this long without handing any back is asked "
        "whether its vLLM engine process still answers (0: never). One that does not is wedged: killed, its groups sent "
        "to the other engines, and replaced with the current weights (orchestrator/rollout/health.py).",
    )
    health_check_timeout_s: float = Field(
        20.0,
        gt=0.0,
        description="How long an engine's vLLM process has to answer a health check. It answers between two model "
        "steps, so this bounds one step (milliseconds on a GPU; raise it for a large model on CPU, where one step "
        "of a long prefill can take longer), not one group; request_timeout_s stays the bound on a group.",
    )
    max_restarts: int = Field(8, ge=0, description="Dead engines replaced per run before the pool stops replacing.")
    max_group_deaths: int = Field(
        2,
        ge=1,
        description="A group on an engine that dies (or misses request_timeout_s) goes to another engine, with at most "
        "one such group per engine; once it has been on this many dying engines it fails by name (group, prompt, its "
        "agent or tools, the last error): its samples score reward_error_score, or the run stops with that message. "
        "Keeps one poison prompt from spending every restart (orchestrator/rollout/poison.py).",
    )
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] | None = Field(
        None,
        description="LoRA runs (lora:): the largest adapter rank the engines serve (vLLM's max_lora_rank, one of the "
        "values vLLM accepts). null: the smallest of them that holds lora.r. Larger costs engine memory.",
    )

    autoscale: AutoscaleSettings | None = Field(
        None,
        description="Size the pool from each step's timings, between autoscale.min_engines and max_engines (null: "
        "fixed at `engines`, resized only by `python -m orchestrator scale`). docs: guides/autoscaling.",
    )

    @model_validator(mode="after")
    def _engines_within_autoscale(self) -> RolloutConfig:
        bounds = self.autoscale
        if bounds is not None and not bounds.min_engines <= self.engines <= bounds.max_engines:
            raise ValueError(
                f"engines ({self.engines}) is outside autoscale's bounds [{bounds.min_engines}, {bounds.max_engines}]: "
                "the pool starts with `engines`"
            )
        return self

    def reserved_gpus(self) -> int:
        """The GPUs all the engines take on a GPU cluster (at autoscale.max_engines, when set)."""
        return self.most_engines() * self.tensor_parallel_size

    def reserved_cpus(self) -> float:
        """The Ray CPUs all the engines reserve (at autoscale.max_engines, when set)."""
        return self.most_engines() * self.num_cpus_per_engine

    def most_engines(self) -> int:
        """The most engines the pool may have: autoscale.max_engines, else `engines`."""
        return self.autoscale.max_engines if self.autoscale is not None else self.engines

    def weight_dtype(self, device: str) -> str | None:
        """The engines' weight dtype where it is known before they start: `dtype`, float32 for 'auto' on
        CPU, None for 'auto' on GPU (vLLM decides from the checkpoint)."""
        if self.dtype != "auto":
            return self.dtype
        return "float32" if device == "cpu" else None
