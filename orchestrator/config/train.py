"""The run config of `train`: TRL GRPOConfig names where one exists, plus the pool and the data.

The learner's part (GRPO hyperparameters, the learner section) is `GRPOSettings` in
contracts/learning.py, which the learner actor imports; `TrainConfig` adds what only the driver
reads: data, rewards, stops, tools, outputs, the pool and weight sync.

With no `--config`, `train` uses the embedded default (`orchestrator/builtin/default_train.yaml`):
the built-in tiny model on the built-in search-call task. Field defaults follow TRL's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.config.sources import PromptSource, ReasoningGymConfig, all_reasoning_gym, all_scored_by_their_own
from orchestrator.contracts import user_functions
from orchestrator.contracts.agents import AgentConfig, AgentUse
from orchestrator.contracts.judges import JudgeSettings
from orchestrator.contracts.learning import GRPOSettings
from orchestrator.contracts.paths import PATH, SPEC
from orchestrator.contracts.reward_models import RewardModelSettings
from orchestrator.contracts.reward_plan import RewardPlan
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.contracts.strict import StrictModel
from orchestrator.contracts.tools import ToolConfig, ToolUse


class WeightSyncConfig(StrictModel):
    timeout_s: float = Field(120.0, gt=0.0, description="Deadline for one sync to reach every engine.")
    bucket_mb: int = Field(
        64,
        ge=1,
        description="Weights travel in buckets of at most about this size (a larger tensor in pieces). A sync holds a "
        "few buckets at a time in the object store and two in each engine's staging memory, never the whole model; "
        "larger buckets mean fewer calls per sync.",
    )
    backend: Literal["auto", "nccl", "gloo", "object_store"] = Field(
        "auto",
        description="How the weights travel. auto: NCCL on GPUs (device), the object store on CPUs and in "
        "vllm_mode colocate. nccl: one "
        "NCCL group of the learner and every engine, opened again when its members change; the bytes never touch "
        "the host. gloo: the same collective path on CPU, with every tensor checksummed (it runs the NCCL path's "
        "code where there is no GPU). object_store: buckets through Ray's object store, on any cluster. A LoRA run "
        "syncs through the object store.",
    )
    delta: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Send only what changed. on: after a dense first sync (an anchor), each sync sends per tensor the "
        "elements whose bits changed (indices and values) or the whole tensor, whichever is smaller; every engine "
        "checks the checksum of all its weights after the patch, and one that rejects it (another version, a checksum "
        "that differs) gets the dense weights in the same sync. The learner and each engine keep a copy of the weights "
        "for it (host memory, the engines' dtype). auto: on where the engines hold a narrower dtype than the learner "
        "trains in (rollout.dtype bfloat16 or float16 beside a float32 learner: most elements do not change from one "
        "step to the next), backend is object_store or gloo, and the cluster has more than one node when the run "
        "starts (the bytes cross a network); off otherwise: float32 engines see every element change, and on one node a patch saves no time. "
        "nccl sends whole models; a LoRA run sends its adapter alone.",
    )
    anchor_every: int = Field(50, ge=1, description="With delta sync: a dense sync of every engine after this many patches.")

    @field_validator("delta", mode="before")
    @classmethod
    def _yaml_switch(cls, value):
        """YAML reads an unquoted on / off as true / false."""
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    def delta_on(self, engine_dtype: str | None, learner_bf16: bool, lora: bool, one_node: bool, backend: str) -> bool:
        """Whether syncs send patches: `delta`, or for auto, engines narrower than the learner on a
        cluster of several nodes, where the bytes cross a network (`one_node`: this machine alone), over
        `backend` (the one the run takes: auto resolved)."""
        if self.delta != "auto":
            return self.delta == "on"
        narrow = engine_dtype in ("bfloat16", "float16") and not learner_bf16
        return narrow and not lora and not one_node and backend in ("object_store", "gloo")


class TrainConfig(GRPOSettings):
    # What to train
    model: str | None = Field(
        None,
        description="Model folder or hub name; null (or builtin:search), builtin:lookup or builtin:chat (a ChatML chat "
        "model) for a built-in tiny model.",
        json_schema_extra=PATH,
    )
    tokenizer: str | None = Field(
        None, description="Learner tokenizer (folder or name); default: the model's.", json_schema_extra=PATH
    )
    model_revision: str | None = Field(
        None,
        description="For a Hub model: the branch, tag or commit to train (TRL's model_revision). Resolved to a "
        "commit before the run starts (the Hub, or the local Hugging Face cache offline), loaded at that commit, and "
        "recorded in the run folder's hub_pins.json; a resume refuses a revision that now names another commit. "
        "Null: the Hub's default branch, unpinned.",
    )
    # Data and rewards
    prompts: str | list[PromptSource] = Field(
        "builtin:search",
        description="Training prompts: a .jsonl or .parquet file; a Hugging Face dataset, by its Hub name (e.g. "
        "trl-lib/DeepMath-103K) or as a local folder that datasets.load_dataset reads (data files such as "
        "data/train-*.parquet) or that save_to_disk wrote; or 'builtin:search', 'builtin:lookup', 'builtin:arithmetic'; or 'reasoning_gym:TASK', a task of "
        "reasoning-gym (settings: reasoning_gym); or 'builtin:reset', TRL's training without a dataset (the default "
        "with environment_factory): one empty user message, to which each environment's reset appends the prompt. "
        "A local file or folder of that name wins over a Hub name. The prompt column (prompts_column) holds strings or "
        "{role, content} message lists; every other column reaches reward functions as a keyword argument. Or a list "
        "of sources, [{source, ratio, name, ...}], drawn by ratio (weighted sources).",
        json_schema_extra=PATH,
    )
    prompts_split: str = Field(
        "train",
        description="The dataset split to train on (TRL's dataset_train_split), for a dataset with splits; a "
        "slice such as 'train[:1000]' works for a Hub name or a data-file folder. A single file has no splits.",
    )
    prompts_subset: str | None = Field(
        None,
        description="The dataset's subset, for one that has several (datasets.load_dataset's `name`, TRL's "
        "dataset_config; e.g. 'main' for openai/gsm8k). Null: its only or default subset.",
    )
    prompts_revision: str | None = Field(
        None,
        description="For a Hub dataset in prompts: the branch, tag or commit to read (datasets.load_dataset's "
        "revision), resolved, loaded and recorded as model_revision is. Null: the default branch, unpinned.",
    )
    prompts_column: str = Field(
        "prompt",
        description="The column that holds the prompts. It becomes the 'prompt' column TRL's GRPO expects; the "
        "other columns reach reward functions under their own names (a column named 'prompt' among them).",
    )
    max_prompt_length: int | None = Field(None, ge=1, description="Longest prompt in tokens; longer prompts are an error.")
    drop_long_prompts: bool = Field(False, description="Skip prompts over max_prompt_length (counted) instead of failing.")
    reward_funcs: list[str] = Field(
        default_factory=lambda: ["builtin:search_call"],
        description="Reward functions: 'path/file.py:name', 'package.module:name' or 'builtin:NAME'; or a reward model "
        "(a folder or a hub id: an entry with no ':NAME'), loaded as TRL loads one (a sequence classifier, num_labels 1) "
        "(default for a reasoning_gym source: builtin:reasoning_gym, the task's own score) "
        "and served by the reward_models workers.",
        json_schema_extra=SPEC,
    )
    reward_weights: list[float] | None = Field(None, description="One weight per reward function (default all 1).")
    reward_processing_classes: list[str | None] | None = Field(
        None,
        description="TRL's GRPOTrainer argument: one tokenizer (a folder or hub id) per reward_funcs entry, used by "
        "the reward models (null entries, and function entries, take none: a reward model then uses its own).",
        json_schema_extra=PATH,
    )
    reward_models: RewardModelSettings = Field(
        default_factory=RewardModelSettings, description="The actor group that serves the reward models in reward_funcs."
    )
    judges: dict[str, JudgeSettings] = Field(
        default_factory=dict,
        description="LLM judges by name: frozen models, each served by an engine pool of its own, that reward "
        "functions ask through their `judges` keyword argument (docs: guides/judges).",
    )
    reward_error_score: float | None = Field(
        None,
        description="If set, a sample whose reward function raises or returns NaN scores this and is counted "
        "(metric reward_errors); if null, the run stops with an error naming the function and the sample.",
    )
    reward_batch_samples: int = Field(
        256,
        ge=1,
        description="Samples per reward task while generation runs: groups are scored together once this many "
        "wait, the rest when generation ends (a step smaller than this is scored once, at the end). Lower it "
        "for slow reward functions, so that scoring overlaps generation sooner.",
    )
    reward_num_cpus: float = Field(
        0.0,
        ge=0.0,
        description="Ray CPUs each reward task reserves. 0: none, so a task runs at once, even while the engines and "
        "the learner hold every CPU, on the driver's node (elsewhere only if that node cannot run it: left to Ray, it "
        "could keep a rollout node the pool no longer uses busy, and Ray's autoscaler would not remove it). Set it for a "
        "heavy reward (a "
        "model, a sandbox) so that Ray places it where CPUs are free: then the cluster needs them beyond the engines' "
        "and the learner's.",
    )
    reward_timeout_s: float = Field(
        300.0,
        gt=0.0,
        description="Seconds one reward task (the reward functions on one batch of groups) may take, counted from its "
        "submission: past it the task is cancelled and the run stops with an error naming the reward functions, or, "
        "with reward_error_score set, the task's samples score that and are counted (reward_errors).",
    )
    reasoning_gym: ReasoningGymConfig = Field(
        default_factory=ReasoningGymConfig, description="For prompts or eval_prompts 'reasoning_gym:TASK'."
    )
    # Chat prompts (TRL's conversational format: see data/conversations.py)
    system_prompt: str | None = Field(
        None, description="A system message put first in every conversational prompt that does not bring its own."
    )
    # Evaluation on held-out prompts (see training/evaluation.py)
    eval_prompts: str | None = Field(
        None,
        description="Held-out prompts, same formats as `prompts` (or 'builtin:arithmetic_eval'); generated on with the "
        "current weights every eval_steps and scored with reward_funcs, never trained on. Null: no evaluation.",
        json_schema_extra=PATH,
    )
    eval_prompts_split: str = Field(
        "test",
        description="The split of an eval_prompts dataset (TRL's dataset_test_split). A dataset with a train split "
        "only can hold out its end: eval_prompts_split: 'train[-500:]' with prompts_split: 'train[:-500]'.",
    )
    eval_prompts_subset: str | None = Field(None, description="The subset of an eval_prompts dataset, as prompts_subset.")
    eval_prompts_column: str = Field(
        "prompt", description="The column of eval_prompts that holds the prompts, as prompts_column."
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
    report_to: list[Literal["tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=list,
        description="Trackers that get every metrics.jsonl line under the same names: 'tensorboard' (event files in "
        "the run folder's tensorboard/), 'wandb' (optional package; WANDB_MODE=offline works without network) and "
        "'mlflow' (optional package mlflow-skinny; MLFLOW_TRACKING_URI, or a file store in the run folder's mlruns/; "
        "MLflow names refuse some characters: eval/pass@4 is eval/pass_4).",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        le=8,
        description="0: on-policy (generate only with the current weights). N (at most 8): up to N steps' batches "
        "generate while the learner trains, so no trained sample is more than N policy versions old (checked per "
        "sample; a group over it is generated again). A sample of older weights is clipped against the engines' "
        "logprobs (the policy that drew it), as PPO does.",
    )
    dynamic_sampling: bool = Field(
        False,
        description="DAPO's dynamic sampling: groups whose rewards are all equal (zero advantage) are not trained "
        "on, and the step generates more groups from the stream until it has prompts_per_step informative ones "
        "(training/dynamic_sampling.py). Dropped groups stay in the rollout Parquet with `filtered` true.",
    )
    dynamic_sampling_max_rounds: int = Field(
        4,
        ge=1,
        le=64,
        description="Extra generation rounds one step may take to fill up; at the limit it trains on what it has, "
        "with a warning (counted in dynamic_sampling/short_steps).",
    )
    # Sampling beyond the learner's temperature, and stops (forwarded to every engine untouched)
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(-1, ge=-1, description="Top-k sampling; -1 keeps all tokens.")
    stop: list[str] = Field(default_factory=list, description="Stop strings, e.g. ['</search>'].")
    stop_token_ids: list[int] = Field(default_factory=list, description="Stop token ids in addition to EOS.")
    include_stop_str_in_output: bool = Field(True, description="Keep the stop string at the end of the completion.")
    ignore_eos: bool = Field(False, description="Do not stop at EOS (benchmarks only).")
    skip_special_tokens: bool = Field(False, description="Drop special tokens from completion text.")
    # Tools: TRL's (functions called through the chat template; contracts/environments.py) or text tags (contracts/tools.py)
    tools: list[ToolConfig | str] = Field(
        default_factory=list,
        description="Tools the model may call, in one of two forms. TRL's: a list of Python functions "
        "['path/file.py:name', 'package.module:name', ...], each described to the model by its type hints and "
        "docstring through the chat template, its calls parsed from the model's replies (conversational prompts and a "
        "tool-calling chat template needed). Text tags: [{name, fn, begin, end, timeout_s}], a call being the text "
        "between two tags (the engine's own loop; max_turns and the observation settings below).",
        json_schema_extra=SPEC,
    )
    environment_factory: str | dict[str, str] | None = Field(
        None,
        description="TRL's environment_factory: an environment class ('path/file.py:Class', 'package.module:Class' or "
        "'builtin:NAME') with reset(**columns) and public methods that are the model's tools, one instance per sample "
        "in flight, reused through reset; or {name: class, ...}, each prompt's 'environment' column naming its own. A "
        "class's get_reward() is one more reward, named after the class, with weight 1.",
        json_schema_extra=SPEC,
    )
    max_tool_calling_iterations: int | None = Field(
        None,
        ge=0,
        description="TRL's: rounds of tool calls per sample with tools: [file.py:fn] or environment_factory; null: "
        "until max_completion_length.",
    )
    tool_call_timeout_s: float = Field(
        60.0,
        gt=0.0,
        description="With tools: [file.py:fn] or environment_factory: one tool call's deadline (its result is then an "
        "error the model sees), and that of an environment's reset and get_reward (the sample then fails).",
    )
    max_turns: int = Field(4, ge=1, description="Model turns per sample: at most max_turns - 1 tool calls are run.")
    max_observation_tokens: int = Field(64, ge=1, description="A tool result longer than this (in tokens) is truncated.")
    tool_error_observation: str = Field(
        " error: {error} ",
        description="What the model sees when a tool raises or times out; '{error}' becomes the reason.",
    )
    # Agents (contracts/agents.py; workers/agents/)
    agent: AgentConfig | None = Field(
        None,
        description="A program that makes each sample's model calls through an OpenAI client, served by the engines' "
        "gateways: {fn, session_timeout_s, call_timeout_s, max_calls, tool_call_parser, on_prefix_mismatch, host}. "
        "With it, reward_funcs defaults to [builtin:agent_reward] (the number the agent returned).",
    )
    # Outputs
    output_dir: str = Field("runs/{time}", description="Run folder; '{time}' becomes the start time.")
    save_steps: int = Field(0, ge=0, description="Checkpoint every N steps (0: only at the end).")
    save_total_limit: int | None = Field(
        None,
        ge=1,
        description="Keep only the newest N checkpoints (TRL's): older ones, those of the run before a --resume "
        "included, are deleted once a new one is complete. null keeps all.",
    )
    plot_steps: int = Field(5, ge=1, description="Redraw the PNG plots every N steps.")
    # Components
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="The vLLM engine pool.")
    weight_sync: WeightSyncConfig = Field(default_factory=WeightSyncConfig, description="Learner -> engines.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where the learner and the engines run. auto: on GPUs when the Ray cluster has GPUs as the run "
        "starts, else on CPUs. cuda: on GPUs even if none has joined the cluster yet (KubeRay GPU pods still "
        "starting): the actors wait for them up to rollout.startup_timeout_s. cpu: on CPUs even where there are GPUs.",
    )
    # Where the engines run on GPUs (TRL's names; orchestrator/placement/colocation.py)
    vllm_mode: Literal["server", "colocate"] | None = Field(
        None,
        description="GPU clusters only. server: every engine on GPUs of its own, beside the learner's "
        "(rollout.engines x rollout.tensor_parallel_size GPUs more). colocate: each learner worker shares its GPU "
        "with one engine (TRL's colocate mode): rollout.engines equals learner.workers, the engine takes "
        "vllm_gpu_memory_utilization of the GPU's memory and the learner the rest, and weights sync through the "
        "object store. null: colocate on a one-node cluster with fewer GPUs than server mode needs, else server.",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3,
        ge=0.05,
        le=0.9,
        description="vllm_mode colocate: the share of its GPU an engine takes (vLLM's gpu_memory_utilization: weights "
        "and KV cache; rollout.gpu_memory_utilization is then unused); the learner's allocator is capped at the rest "
        "less 5% (learner.max_gpu_memory_fraction) and Ray schedules the pair by the same split. Checked on any "
        "device, unused on CPU.",
    )

    @model_validator(mode="after")
    def _check_colocation(self) -> TrainConfig:
        if self.vllm_mode != "colocate":
            return self
        rollout = self.rollout
        if rollout.autoscale is not None or rollout.engines != self.learner.workers or rollout.tensor_parallel_size != 1:
            raise ValueError(
                f"vllm_mode: colocate puts one engine on each learner worker's GPU: set rollout.engines to learner.workers "
                f"({self.learner.workers}; got {rollout.engines}), rollout.tensor_parallel_size to 1 (got "
                f"{rollout.tensor_parallel_size}) and no rollout.autoscale, or vllm_mode: server"
            )
        if self.weight_sync.backend in ("nccl", "gloo"):
            raise ValueError(
                f"weight_sync.backend: {self.weight_sync.backend} needs a rank per GPU, but vllm_mode: colocate puts the "
                "learner and an engine on one: set weight_sync.backend to auto or object_store"
            )
        return self

    @model_validator(mode="after")
    def _check_weight_sync(self) -> TrainConfig:
        if self.lora is not None and self.weight_sync.backend in ("nccl", "gloo"):
            raise ValueError(
                f"weight_sync.backend: {self.weight_sync.backend} sends whole models, but a LoRA run sends only its "
                "adapter after the first sync: set weight_sync.backend: auto (or object_store) with lora:"
            )
        if self.weight_sync.delta == "on" and self.lora is not None:
            raise ValueError(
                "weight_sync.delta: on patches the whole model, but a LoRA run sends only its adapter after the first "
                "sync (megabytes): set weight_sync.delta to auto or off with lora:"
            )
        if self.weight_sync.delta == "on" and self.weight_sync.backend == "nccl":
            raise ValueError(
                "weight_sync.delta: on sends patches through the object store or gloo; weight_sync.backend: nccl "
                "sends whole models (vLLM's in-place sparse path is not wired yet): set weight_sync.backend to "
                "object_store, or delta to off"
            )
        return self

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(
                f"reward_weights has {len(self.reward_weights)} entries but reward_funcs has {len(self.reward_funcs)}"
            )
        if self.reward_processing_classes is not None and len(self.reward_processing_classes) != len(self.reward_funcs):
            raise ValueError(
                f"reward_processing_classes has {len(self.reward_processing_classes)} entries but reward_funcs has "
                f"{len(self.reward_funcs)}: give one per reward_funcs entry (null where none)"
            )
        _ = self.reward_plan  # a function weighed twice, or two functions of one name, raise here
        if not self.reward_funcs and self.environment_factory is None:
            unscored = [source.label for source in self.prompt_sources if source.reward_funcs is None]
            if unscored or not isinstance(self.prompts, list):
                where = f" (source {unscored[0]!r} has none of its own)" if isinstance(self.prompts, list) else ""
                raise ValueError(f"reward_funcs is empty: at least one reward function is needed{where}")
            if self.eval_prompts is not None:
                raise ValueError(
                    "reward_funcs is empty, and eval_prompts are scored by the top-level reward_funcs (the sources' "
                    "own score only their rows): set reward_funcs"
                )
        if self.eval_temperature == 0 and self.eval_num_generations > 1:  # vLLM refuses n > 1 when greedy
            raise ValueError(
                f"eval_temperature: 0 is greedy, which gives one completion per prompt; set eval_num_generations: 1 "
                f"(got {self.eval_num_generations}) or a temperature above 0"
            )
        if self.dynamic_sampling and self.max_staleness > 0:
            raise ValueError(
                f"dynamic_sampling generates a step's extra groups after its first ones are scored, which a batch "
                f"generated ahead (max_staleness {self.max_staleness}) cannot wait for: set max_staleness: 0 or "
                "dynamic_sampling: false"
            )
        shortest = self.num_generations * self.learner.workers  # a short step trains a group per learner rank
        if self.dynamic_sampling and self.steps_per_generation > shortest:
            raise ValueError(
                f"steps_per_generation ({self.steps_per_generation}) is more than the samples of a step that "
                f"dynamic_sampling cut short ({shortest}: one group per learner worker), which would leave updates with "
                "nothing to train on: lower steps_per_generation"
            )
        if self.lora is not None and self.rollout.max_lora_rank is not None and self.lora.r > self.rollout.max_lora_rank:
            raise ValueError(
                f"lora.r ({self.lora.r}) is more than rollout.max_lora_rank ({self.rollout.max_lora_rank}), the largest "
                "adapter rank the engines serve: raise rollout.max_lora_rank or lower lora.r"
            )
        for key in ("name", "end"):
            values = [getattr(tool, key) for tool in self.text_tools]
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"tools: two tools share the {key} {repeated[0]!r}; each needs its own")
        return self

    @model_validator(mode="before")
    @classmethod
    def _agent_reward_by_default(cls, data):
        if isinstance(data, dict) and data.get("agent") and "reward_funcs" not in data:
            return {**data, "reward_funcs": ["builtin:agent_reward"]}
        if isinstance(data, dict) and data.get("environment_factory") and "prompts" not in data:
            data = {**data, "prompts": "builtin:reset"}  # TRL's: no dataset, the environment's reset writes each prompt
        if isinstance(data, dict) and data.get("environment_factory") and "reward_funcs" not in data:
            return {**data, "reward_funcs": []}  # the environments' get_reward (TRL: reward_funcs optional then)
        if isinstance(data, dict) and "reward_funcs" not in data and all_reasoning_gym(data.get("prompts")):
            return {**data, "reward_funcs": ["builtin:reasoning_gym"]}  # the task's own score_answer
        if isinstance(data, dict) and "reward_funcs" not in data and all_scored_by_their_own(data.get("prompts")):
            return {**data, "reward_funcs": []}  # nothing is left for the top-level functions to score
        return data

    @model_validator(mode="after")
    def _sources_are_named_once(self):
        if isinstance(self.prompts, list):
            if not self.prompts:
                raise ValueError("prompts: an empty list; name at least one source")
            labels = [source.label for source in self.prompts]
            repeated = sorted({label for label in labels if labels.count(label) > 1})
            if repeated:
                raise ValueError(f"prompts: two sources are named {repeated[0]!r}; give each its own name")
            if self.prompts_revision is not None:
                raise ValueError("prompts_revision pins one Hub dataset; with several prompts sources, leave it out")
        return self

    @property
    def reward_plan(self) -> RewardPlan:
        """Which reward functions score which rows (contracts/reward_plan.py): the top-level ones, and
        the sources' own."""
        sources = [(source.label, source.reward_funcs, source.reward_weights) for source in self.prompt_sources]
        return RewardPlan.of(self.reward_funcs, self.reward_weights, sources)

    @property
    def prompt_sources(self) -> list[PromptSource]:
        """`prompts` as a list of sources: one source of ratio 1 when it names one."""
        return [PromptSource(source=self.prompts)] if isinstance(self.prompts, str) else self.prompts

    @property
    def text_tools(self) -> list[ToolConfig]:
        """The text-tag tools (the engine's own loop)."""
        return [tool for tool in self.tools if isinstance(tool, ToolConfig)]

    @property
    def function_tools(self) -> list[str]:
        """TRL's tools: functions called through the chat template."""
        return [tool for tool in self.tools if isinstance(tool, str)]

    @model_validator(mode="after")
    def _check_tool_forms(self) -> TrainConfig:
        if self.text_tools and self.function_tools:
            raise ValueError(
                "tools mixes TRL's form (file.py:fn) with text tags ({name, fn, begin, end}): the first are called through "
                "the chat template, the others between tags; use one form"
            )
        if self.text_tools and self.environment_factory is not None:
            raise ValueError(
                "environment_factory with text-tag tools: an environment's tools are called through the chat template; "
                "give its extra tools in TRL's form (tools: [file.py:fn]) or drop them"
            )
        if self.agent is not None and self.environment_factory is not None:
            raise ValueError("agent with environment_factory: an agent runs its own tools and state; keep one of them")
        if isinstance(self.environment_factory, dict) and not self.environment_factory:
            raise ValueError("environment_factory is an empty mapping: name at least one environment class")
        for index, source in enumerate(self.prompt_sources):
            if (source.max_completion_length or 0) > self.max_completion_length:
                raise ValueError(
                    f"prompts[{index}].max_completion_length ({source.max_completion_length}) is more than "
                    f"max_completion_length ({self.max_completion_length}), the learner's budget for every sample: "
                    "lower the source's or raise the top-level one"
                )
            named = self.environment_factory if isinstance(self.environment_factory, dict) else {}
            if source.environment is not None and source.environment not in named:
                raise ValueError(
                    f"prompts[{index}].environment: {source.environment!r} is not an entry of environment_factory "
                    f"(a source names one of {{name: class, ...}}; expected one of: {list(named)})"
                )
        return self

    @model_validator(mode="after")
    def _check_agent(self) -> TrainConfig:
        if self.agent is None:
            return self
        if self.tools:
            raise ValueError(
                "agent and tools both set: an agent runs its own tools, and tools[] is the engine's text-tag loop; keep one"
            )
        if self.lora is not None:
            raise ValueError("agent with lora: the agents' gateway serves the full model only; remove lora or agent")
        return self

    def agent_use(self) -> AgentUse | None:
        """What the engines need for agent sessions: the agent's file as this process first read it, and a
        new token that every call of these sessions must carry."""
        if self.agent is None:
            return None
        files = user_functions.ship({self.agent.fn: "agent.fn"})
        return AgentUse(config=self.agent, files=files)

    def tool_use(self) -> ToolUse | None:
        """What the engines need for tool calls, the tools' files included as this process first read
        them (on the driver: when the run was checked), so every call everywhere runs that copy."""
        if not self.text_tools:
            return None
        return ToolUse(
            tools=self.text_tools,
            max_turns=self.max_turns,
            max_observation_tokens=self.max_observation_tokens,
            error_observation=self.tool_error_observation,
            files=user_functions.ship({tool.fn: f"tools[{index}].fn" for index, tool in enumerate(self.text_tools)}),
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
