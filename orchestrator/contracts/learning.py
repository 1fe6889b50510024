"""What the learner is told: TRL GRPOConfig's names and TRL's defaults, plus the learner section.

`TrainConfig` (orchestrator/config/train.py) extends `GRPOSettings` with everything only the
driver reads; the learner actor receives the run config and reads the fields declared here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestrator.contracts.lora import LoraSettings
from orchestrator.contracts.paths import PATH
from orchestrator.contracts.strict import StrictModel

LEARNER_STATE = "learner_state.pt"  # in a checkpoint: optimizer, scheduler, RNG, policy version (beside the HF model)


class LearnerConfig(StrictModel):
    workers: int = Field(
        1,
        ge=1,
        description="Data-parallel learner ranks (one Ray actor each, placed together on learner nodes, in one "
        "torch.distributed group: gloo on CPU, NCCL on GPU). Each trains on whole groups of the step and the "
        "optimizer step is the one a single learner takes on the whole step. At most prompts_per_step.",
    )
    num_cpus: float = Field(1.0, ge=0.0, description="Ray CPUs reserved for each learner worker.")
    num_gpus: int | None = Field(
        None,
        ge=0,
        le=1,
        description="GPUs for each learner worker: 0 or 1 (more GPUs are more workers: learner.workers). null: 1 "
        "when the run is on GPUs (device), else 0. 0 in a run on GPUs is an error (device: cpu runs on CPUs).",
    )
    fsdp: bool = Field(
        False,
        description="Shard weights, gradients and optimizer state over the learner workers (FSDP2 through accelerate), "
        "so a model larger than one worker's memory trains; rank 0 gathers the weights whole, on the host, for "
        "engines and checkpoints. Needs workers > 1. false: every worker holds the whole model (DDP).",
    )
    bf16: bool = Field(False, description="bf16 training (GPU only).")
    max_tokens_per_micro_batch: int | None = Field(
        8192,
        ge=1,
        description="Token budget of one forward/backward pass: samples are grouped by length into micro-batches of "
        "at most this many tokens (prompt + completion; padded micro-batches count their padding), which "
        "accumulate gradients into one optimizer step with the same loss as the whole step at once. Bounds the "
        "learner's activation memory whatever the step size; a sample longer than the budget is a micro-batch of "
        "its own. null: no budget (micro_batch_size alone, or the whole step in one pass).",
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="At most this many samples per forward/backward pass, besides the token budget; with "
        "max_tokens_per_micro_batch null, consecutive slices of this many samples. null: no limit on samples.",
    )
    padding_free: bool | None = Field(
        None,
        description="Pack each micro-batch's sequences into one row (position_ids restart per sequence), so no pad "
        "token is computed. null: packed when the model supports it (checked at start, and logged), padded "
        "otherwise; true: packed, or an error at start; false: always padded.",
    )
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="CPU threads for the learner's torch. null: on a CPU learner, the node's cores shared by the "
        "learner workers (engines and learner take turns in synchronous runs, so the learner may use them "
        "all; Ray alone would give it num_cpus), except in async mode (max_staleness 1 or more) on a one-node "
        "cluster, where it gets half the node's cores and the engines the rest; on a GPU learner, what Ray gives it (num_cpus), so the "
        "engines' schedulers on the node are not starved.",
    )
    max_gpu_memory_fraction: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="The share of its GPU's memory the learner's torch allocator may hold "
        "(torch.cuda.set_per_process_memory_fraction); it then also returns its cached blocks after every step. "
        "null: no cap, except in vllm_mode colocate: 1 - vllm_gpu_memory_utilization - 0.05, so the engine beside "
        "it (a replacement too) finds its share free.",
    )
    collective_timeout_s: float = Field(
        1800.0,
        gt=0.0,
        description="How long a data-parallel learner rank (learner.workers > 1) waits for the others in one "
        "collective call, and at start for every rank to join, before the learner counts as dead (then restarted: "
        "max_restarts). Longer than any step's work one rank does alone: in async mode rank 0 serves weight syncs "
        "(up to weight_sync.timeout_s) while the others wait in the next collective.",
    )
    max_restarts: int = Field(
        1,
        ge=0,
        description="Times a dead learner (killed, out of memory, stuck past weight_sync.timeout_s) is restarted "
        "from the last checkpoint, the engines reloaded with its weights and the steps after it run again. 0: the "
        "run stops with the --resume command to continue it. Checkpoints every save_steps bound what is redone.",
    )


class GRPOSettings(StrictModel):
    added_tokens: list[str] = Field(
        default_factory=list, description="Special tokens added to the tokenizer (embeddings resized) before anything else."
    )
    # The chat template the learner's tokenizer carries (TRL's conversational format: data/conversations.py)
    chat_template: str | None = Field(
        None,
        description="Jinja chat template (a file, or the template itself) replacing the tokenizer's; conversational "
        "prompts are rendered with it, and the learner's tokenizer (shipped to engines, saved in checkpoints) carries it.",
        json_schema_extra=PATH,
    )
    prompts_per_step: int = Field(4, ge=1, description="Groups per step; samples per step = this x num_generations.")
    # GRPO (TRL GRPOConfig names)
    num_generations: int = Field(8, ge=2, description="Samples per prompt (the group size).")
    max_completion_length: int = Field(
        512, ge=1, description="Completion budget in tokens; with tools, model and observation tokens together."
    )
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature (the learner divides logits by it too).")
    learning_rate: float = Field(1e-6, gt=0.0, description="AdamW learning rate.")
    beta: float = Field(0.0, ge=0.0, description="KL coefficient against the reference model (0: no reference model).")
    epsilon: float = Field(0.2, gt=0.0, description="Clipping range of the importance ratio.")
    epsilon_high: float | None = Field(None, gt=0.0, description="Upper clipping range (default: epsilon).")
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"] = Field(
        "dapo", description="TRL loss type."
    )
    delta: float | None = Field(
        None,
        gt=1.0,
        description="Two-sided clipping: the importance ratio is also capped at this (grpo, bnpo, dr_grpo, dapo, luspo).",
    )
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token",
        description="The learner's ratio against the old policy per token, or one per sequence (the geometric mean "
        "of its tokens' ratios: GSPO, with loss_type grpo).",
    )
    num_iterations: int = Field(
        1,
        ge=1,
        le=16,
        description="Optimizer updates on each step's batch (TRL's num_iterations, mu in the GRPO paper): the learner "
        "computes the old log-probs before the first, and each update clips its ratio against them. A step here "
        "is one generation round, so the learning-rate schedule runs over max_steps x num_iterations updates. That "
        "extra no-grad pass over the round (`old-lp pass` on the step line) runs only when num_iterations or "
        "steps_per_generation is above 1; otherwise the loss's own forward pass gives the old log-probs (detached, "
        "as TRL does) and the engine correction, so the pass is skipped at no change to the loss.",
    )
    steps_per_generation: int = Field(
        1,
        ge=1,
        le=64,
        description="Optimizer updates per generation round, each on its own part of the round's samples (TRL's "
        "steps_per_generation: the batch is shuffled and split into this many parts, and every update clips against "
        "the log-probs from before the first). TRL counts gradient-accumulation steps in it; micro-batches are "
        "formed by tokens here, so TRL's steps_per_generation / gradient_accumulation_steps is the value to set. "
        "With num_iterations, the parts are gone through num_iterations times.",
    )
    mask_truncated_completions: bool = Field(
        False, description="Leave completions cut off at max_completion_length (no EOS or stop) out of the loss."
    )
    top_entropy_quantile: float = Field(
        1.0, gt=0.0, le=1.0, description="Train only on the tokens of highest entropy, this fraction of them (1: all)."
    )
    # Engines -> learner mismatch (TRL's names and defaults; workers/learner/importance_sampling.py)
    vllm_importance_sampling_correction: bool = Field(
        True,
        description="Weight each token's loss by the learner's probability over the engines' (importance sampling), "
        "correcting for engines that sample in another dtype or with top_p/top_k. false: the samples are trained as "
        "if the learner had drawn them. Either way a sample of older weights (max_staleness) is clipped against the "
        "engines' log-probs instead.",
    )
    vllm_importance_sampling_mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = Field(
        "sequence_mask",
        description="token_* weigh each token by its own ratio, sequence_* by the sequence's (the product of its "
        "tokens'); *_truncate clips ratios into [clip_min, clip_max], *_mask gives the ratios outside it weight 0.",
    )
    vllm_importance_sampling_clip_max: float | None = Field(3.0, gt=0.0, description="Upper bound of the ratio (null: none).")
    vllm_importance_sampling_clip_min: float | None = Field(None, ge=0.0, description="Lower bound of the ratio (null: none).")
    off_policy_mask_threshold: float | None = Field(
        None,
        gt=0.0,
        description="Leave out of the loss the sequences of negative advantage whose mean engines-vs-learner KL is "
        "above this (DeepSeek-V3.2's off-policy sequence mask). null: off.",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="Advantage scaling: std of group/batch/none.")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping norm.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field("constant", description="Learning-rate schedule.")
    seed: int = Field(42, description="Seeds the prompt stream, sampling and the learner.")
    max_steps: int = Field(20, ge=1, description="Optimizer steps (one per generation round).")
    learner: LearnerConfig = Field(default_factory=LearnerConfig, description="The learner actor.")
    lora: LoraSettings | None = Field(
        None, description="Train a LoRA adapter (PEFT) instead of every weight; only the adapter is synced. null: off."
    )

    @model_validator(mode="after")
    def _check_learner(self) -> GRPOSettings:
        if self.learner.workers > self.prompts_per_step:  # a rank trains on whole groups: one at least
            raise ValueError(
                f"learner.workers ({self.learner.workers}) is more than prompts_per_step ({self.prompts_per_step}): "
                "each learner worker trains on whole groups, so lower learner.workers or raise prompts_per_step"
            )
        # Each rank splits its own share (whole groups, one at least) into the round's parts, as TRL splits
        # each process's generation batch; every part needs a sample on every rank.
        smallest_share = self.samples_per_step if self.learner.workers == 1 else self.num_generations
        if self.steps_per_generation > smallest_share:
            raise ValueError(
                f"steps_per_generation ({self.steps_per_generation}) is more than the "
                + (
                    f"samples of a step ({smallest_share})"
                    if self.learner.workers == 1
                    else f"samples of a group ({smallest_share}), the least a learner worker can get"
                )
                + ": every update needs a sample on every learner worker; lower steps_per_generation"
            )
        if self.learner.fsdp and self.learner.workers == 1:
            raise ValueError("learner.fsdp shards the model over learner workers: set learner.workers to 2 or more")
        if self.lora is not None and self.learner.fsdp:
            raise ValueError(
                "lora with learner.fsdp is not supported: an adapter is small, so data parallelism (learner.fsdp: false, "
                "learner.workers > 1) trains it; the base model must then fit one learner worker"
            )
        if self.lora is not None and self.added_tokens:
            raise ValueError(
                f"lora with added_tokens {self.added_tokens}: the new tokens' embedding rows would be new weights, which an "
                "adapter does not carry (and vLLM cannot serve them trained whole); use a tokenizer that has the tokens, "
                "or train the full model (lora: null)"
            )
        return self

    @model_validator(mode="after")
    def _check_correction(self) -> GRPOSettings:
        low, high = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if low is not None and high is not None and low >= high:
            raise ValueError(
                f"vllm_importance_sampling_clip_min ({low}) is not below vllm_importance_sampling_clip_max ({high}): "
                "no ratio could pass; lower clip_min or raise clip_max"
            )
        mode = self.vllm_importance_sampling_mode
        if self.vllm_importance_sampling_correction and mode.endswith("truncate") and low is None and high is None:
            raise ValueError(
                f"vllm_importance_sampling_mode {mode} clips the ratio, but vllm_importance_sampling_clip_min and "
                "clip_max are both null: set one, or use a *_mask mode"
            )
        if self.loss_type == "vespo" and self.vllm_importance_sampling_correction and not mode.startswith("token"):
            raise ValueError(
                f"loss_type vespo weighs sequences itself and takes per-token corrections only: set "
                f"vllm_importance_sampling_mode to token_truncate or token_mask (got {mode})"
            )
        return self

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations
