"""The run config of `train`: TRL GRPOConfig names where one exists, plus the pool and the data.

With no `--config`, `train` uses the embedded default (`orchestrator/builtin/default_train.yaml`):
the built-in tiny model on the built-in search-call task. Field defaults follow TRL's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestrator.config.base import StrictModel
from orchestrator.config.rollout import RolloutConfig
from orchestrator.config.sampling import SamplingConfig
from orchestrator.config.tools import ToolConfig, ToolUse


class WeightSyncConfig(StrictModel):
    timeout_s: float = Field(120.0, gt=0.0, description="Deadline for one sync to reach every engine.")
    bucket_mb: int = Field(256, ge=1, description="Weights travel packed in buckets of about this size.")


class LearnerConfig(StrictModel):
    num_cpus: float = Field(1.0, ge=0.0, description="Ray CPUs reserved for the learner actor.")
    num_gpus: int = Field(0, ge=0, description="GPUs for the learner (0 on CPU; >1 goes through accelerate).")
    bf16: bool = Field(False, description="bf16 training (GPU only).")


class TrainConfig(StrictModel):
    # What to train
    model: str | None = Field(
        None,
        description="Model folder or hub name; null (or builtin:search), builtin:lookup or builtin:chat (a ChatML chat "
        "model) for a built-in tiny model.",
    )
    tokenizer: str | None = Field(None, description="Learner tokenizer (folder or name); default: the model's.")
    added_tokens: list[str] = Field(
        default_factory=list, description="Special tokens added to the tokenizer (embeddings resized) before anything else."
    )
    # Data and rewards
    prompts: str = Field(
        "builtin:search",
        description="Prompt file (.jsonl/.parquet or a datasets.save_to_disk folder; a 'prompt' column of strings or of "
        "{role, content} message lists), 'builtin:search', 'builtin:lookup' or 'builtin:arithmetic'.",
    )
    prompts_per_step: int = Field(4, ge=1, description="Groups per step; samples per step = this x num_generations.")
    reward_funcs: list[str] = Field(
        default_factory=lambda: ["builtin:search_call"],
        description="Reward functions: 'path/file.py:name', 'package.module:name' or 'builtin:NAME'.",
    )
    reward_weights: list[float] | None = Field(None, description="One weight per reward function (default all 1).")
    reward_error_score: float | None = Field(
        None,
        description="If set, a sample whose reward function raises or returns NaN scores this and is counted "
        "(metric reward_errors); if null, the run stops with an error naming the function and the sample.",
    )
    # Chat prompts (TRL's conversational format: see data/conversations.py)
    chat_template: str | None = Field(
        None,
        description="Jinja chat template (a file, or the template itself) replacing the tokenizer's; conversational "
        "prompts are rendered with it, and the learner's tokenizer (shipped to engines, saved in checkpoints) carries it.",
    )
    system_prompt: str | None = Field(
        None, description="A system message put first in every conversational prompt that does not bring its own."
    )
    # Evaluation on held-out prompts (see training/evaluation.py)
    eval_prompts: str | None = Field(
        None,
        description="Held-out prompts, same formats as `prompts` (or 'builtin:arithmetic_eval'); generated on with the "
        "current weights every eval_steps and scored with reward_funcs, never trained on. Null: no evaluation.",
    )
    eval_steps: int = Field(10, ge=1, description="Evaluate after every N training steps, and after the last one.")
    eval_num_generations: int = Field(4, ge=1, description="Samples per eval prompt: the k of eval/pass@k.")
    eval_temperature: float | None = Field(
        None,
        ge=0.0,
        description="Sampling temperature for evaluation; null: the training temperature. 0 is greedy, one completion "
        "per prompt (eval_num_generations: 1).",
    )
    # Experiment tracking (see training/trackers.py)
    report_to: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list,
        description="Trackers that get every metrics.jsonl line under the same names: 'tensorboard' (event files in "
        "the run folder's tensorboard/) and 'wandb' (optional package; WANDB_MODE=offline works without network).",
    )
    # GRPO (TRL GRPOConfig names)
    num_generations: int = Field(8, ge=2, description="Samples per prompt (the group size).")
    max_prompt_length: int | None = Field(None, ge=1, description="Longest prompt in tokens; longer prompts are an error.")
    drop_long_prompts: bool = Field(False, description="Skip prompts over max_prompt_length (counted) instead of failing.")
    max_completion_length: int = Field(
        512, ge=1, description="Completion budget in tokens; with tools, model and observation tokens together."
    )
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature (the learner divides logits by it too).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(-1, ge=-1, description="Top-k sampling; -1 keeps all tokens.")
    learning_rate: float = Field(1e-6, gt=0.0, description="AdamW learning rate.")
    beta: float = Field(0.0, ge=0.0, description="KL coefficient against the reference model (0: no reference model).")
    epsilon: float = Field(0.2, gt=0.0, description="Clipping range of the importance ratio.")
    epsilon_high: float | None = Field(None, gt=0.0, description="Upper clipping range (default: epsilon).")
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"] = Field("dapo", description="TRL loss type.")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="Advantage scaling: std of group/batch/none.")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping norm.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field("constant", description="Learning-rate schedule.")
    seed: int = Field(42, description="Seeds the prompt stream, sampling and the learner.")
    max_steps: int = Field(20, ge=1, description="Optimizer steps (one per generation round).")
    max_staleness: int = Field(
        0,
        ge=0,
        le=1,
        description="0: on-policy (generate only with the current weights). 1: generate step t+1 while the "
        "learner trains step t; no trained sample is more than one policy version old. Off-policy samples are "
        "corrected by TRL's clipped importance ratio against the engines' logprobs.",
    )
    # Stops (forwarded to every engine untouched)
    stop: list[str] = Field(default_factory=list, description="Stop strings, e.g. ['</search>'].")
    stop_token_ids: list[int] = Field(default_factory=list, description="Stop token ids in addition to EOS.")
    include_stop_str_in_output: bool = Field(True, description="Keep the stop string at the end of the completion.")
    ignore_eos: bool = Field(False, description="Do not stop at EOS (benchmarks only).")
    skip_special_tokens: bool = Field(False, description="Drop special tokens from completion text.")
    # Tools (multi-turn rollouts; see config/tools.py)
    tools: list[ToolConfig] = Field(default_factory=list, description="Tools the model may call: [{name, fn, begin, end, timeout_s}].")
    max_turns: int = Field(4, ge=1, description="Model turns per sample: at most max_turns - 1 tool calls are run.")
    max_observation_tokens: int = Field(64, ge=1, description="A tool result longer than this (in tokens) is truncated.")
    tool_error_observation: str = Field(
        " error: {error} ",
        description="What the model sees when a tool raises or times out; '{error}' becomes the reason.",
    )
    # Outputs
    output_dir: str = Field("runs/{time}", description="Run folder; '{time}' becomes the start time.")
    save_steps: int = Field(0, ge=0, description="Checkpoint every N steps (0: only at the end).")
    plot_steps: int = Field(5, ge=1, description="Redraw the PNG plots every N steps.")
    # Components
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="The vLLM engine pool.")
    learner: LearnerConfig = Field(default_factory=LearnerConfig, description="The learner actor.")
    weight_sync: WeightSyncConfig = Field(default_factory=WeightSyncConfig, description="Learner -> engines.")

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(
                f"reward_weights has {len(self.reward_weights)} entries but reward_funcs has {len(self.reward_funcs)}"
            )
        if not self.reward_funcs:
            raise ValueError("reward_funcs is empty: at least one reward function is needed")
        if self.eval_temperature == 0 and self.eval_num_generations > 1:  # vLLM refuses n > 1 when greedy
            raise ValueError(
                f"eval_temperature: 0 is greedy, which gives one completion per prompt; set eval_num_generations: 1 "
                f"(got {self.eval_num_generations}) or a temperature above 0"
            )
        for key in ("name", "end"):
            values = [getattr(tool, key) for tool in self.tools]
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"tools: two tools share the {key} {repeated[0]!r}; each needs its own")
        return self

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations

    def tool_use(self) -> ToolUse | None:
        if not self.tools:
            return None
        return ToolUse(
            tools=self.tools,
            max_turns=self.max_turns,
            max_observation_tokens=self.max_observation_tokens,
            error_observation=self.tool_error_observation,
        )

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(
            max_tokens=self.max_completion_length,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            stop=self.stop,
            stop_token_ids=self.stop_token_ids,
            include_stop_str_in_output=self.include_stop_str_in_output,
            ignore_eos=self.ignore_eos,
            skip_special_tokens=self.skip_special_tokens,
        )
