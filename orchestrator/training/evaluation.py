"""Evaluation on held-out prompts: every `eval_steps` the pool generates on them with the current
weights, and the reward functions score the samples. Nothing here is trained on.

    eval_prompts: builtin:arithmetic_eval   # or a file, folder or dataset name, as `prompts` takes
    eval_steps: 5                           # after steps 5, 10, ... and after the last step
    eval_num_generations: 4                 # the k of eval/pass@k
    eval_temperature: 1.0                   # 0 is greedy (then eval_num_generations: 1); null: as training

What it records, on the metrics.jsonl line of the step it follows: `eval/reward_mean`,
`eval/reward_std`, `eval/pass@1` (share of samples that pass), `eval/pass@K` (share of prompts with
at least one passing sample among their K), `eval/completion_length`, `eval/samples`,
`eval/policy_version`, `time/eval`. A sample passes when its reward is at least PASS_REWARD, what a
right answer scores with 0/1 rewards such as `builtin:math_answer`. The samples themselves go to
`eval/step-NNNNNN.parquet` in the run folder (the rollout schema plus step and reward).

The training stream is untouched: eval groups take their ids from EVAL_GROUP_BASE up, never from
the prompt stream, and their seeds come from the eval prompt's index (so every round samples each
prompt with the same random numbers, and rounds differ only by the weights).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.environments import EnvironmentUse
from orchestrator.contracts.groups import GroupRequest
from orchestrator.rewards.scoring import RewardScorer
from orchestrator.rollout.groups import make_groups, row_inputs
from orchestrator.rollout.parquet import rollout_table, write_parquet
from orchestrator.rollout.samples import StepSamples

EVAL_GROUP_BASE = 1 << 40  # far beyond any training stream position
EVAL_SEED_OFFSET = 7_919_000  # eval prompt i samples with seed + this + i: apart from training groups' seeds
PASS_REWARD = 1.0


@dataclasses.dataclass(frozen=True)
class EvalSet:
    """Held-out prompts as checked before Ray starts (conversations already rendered)."""

    source: str  # what eval_prompts named
    prompts: list[str]  # the text the engines continue
    columns: Sequence[dict]  # each prompt's other dataset columns (reward kwargs; data/prompt_data.py)
    conversations: list[list[dict]] | None  # the messages, when the prompts were conversations
    prompt_ids: list[list[int]]  # each prompt's ids with the canonical tokenizer, computed once
    environment_names: list[str] | None = None  # with environments: each prompt's (orchestrator/environments.py)


class Evaluation:
    def __init__(
        self,
        config: TrainConfig,
        eval_set: EvalSet,
        reward_models: list | None = None,
        judges: dict | None = None,
        environment: EnvironmentUse | None = None,
    ):
        """`reward_models`: the run's reward-model workers (rewards/models.py), when reward_funcs names models;
        `judges`: the reward functions' judge clients (orchestrator/judges/), when the run has judges;
        `environment`: the run's TRL tools and environments (orchestrator/environments.py)."""
        self.config = config
        self.set = eval_set
        self.environment = environment
        temperature = config.temperature if config.eval_temperature is None else config.eval_temperature
        self.sampling = config.sampling().model_copy(update={"temperature": temperature})
        self.scorer = RewardScorer(  # the reward functions get exactly what they get in training
            config.reward_funcs,
            config.reward_weights,
            config.reward_error_score,
            eval_set.columns,
            config.reward_batch_samples,
            eval_set.conversations,
            timeout_s=config.reward_timeout_s,
            num_cpus=config.reward_num_cpus,
            reward_models=reward_models,
            judges=judges,
            environment=environment,
        )
        self.rounds = 0

    def due(self, step: int) -> bool:
        return step % self.config.eval_steps == 0 or step == self.config.max_steps

    def requests(self) -> list[GroupRequest]:
        """This round's groups: fresh ids, and seeds that depend only on the eval prompt's index."""
        base = EVAL_GROUP_BASE + self.rounds * len(self.set.prompts)
        # An engine seeds group g with sampling.seed + g; this makes it seed + offset + i.
        sampling = self.sampling.model_copy(update={"seed": self.config.seed + EVAL_SEED_OFFSET - base})
        tools = self.config.tool_use()  # one object: the tools' files travel once per batch of requests
        agent = self.config.agent_use()
        count = len(self.set.prompts)
        rows = agent is not None or self.environment is not None
        return make_groups(
            self.set.prompts,
            self.set.prompt_ids,
            self.config.eval_num_generations,
            sampling,
            tools,
            group_ids=range(base, base + count),
            agent=agent,
            inputs=[row_inputs(self.set, index) for index in range(count)] if rows else None,
            environment=self.environment,
            environment_names=self.set.environment_names,
        )

    def run(self, pool, step: int, folder: Path) -> dict:
        """Generate on every eval prompt with the pool, score, write `folder/step-N.parquet`; the
        eval metrics."""
        start = time.perf_counter()
        requests = self.requests()
        self.rounds += 1
        rewards = self.scorer.begin(requests)
        samples = StepSamples.assemble(requests, pool.generate(requests, on_result=rewards.add))
        samples.reward = np.asarray(rewards.close().scores()["reward"], dtype=np.float64)
        write_parquet(rollout_table(samples, step), folder / f"step-{step:06d}.parquet")
        metrics = eval_metrics(samples, self.config.eval_num_generations)
        metrics["time/eval"] = time.perf_counter() - start
        return metrics


def eval_metrics(samples: StepSamples, k: int) -> dict:
    """Reward, pass@1, pass@k and length of one evaluation round (the samples' rewards set)."""
    sessions = samples.sessions()  # a split agent session's segments share its reward: counted once
    rewards = samples.reward[sessions]
    passed = rewards >= PASS_REWARD
    groups, member_of = np.unique(samples.group_id[sessions], return_inverse=True)
    any_passed = np.bincount(member_of, weights=passed, minlength=len(groups)) > 0
    return {
        "eval/reward_mean": float(rewards.mean()),
        "eval/reward_std": float(rewards.std()),
        "eval/pass@1": float(passed.mean()),
        f"eval/pass@{k}": float(np.mean(any_passed)),
        "eval/completion_length": float(np.mean(samples.model_tokens())),  # the model's tokens
        "eval/samples": len(samples),
        "eval/policy_version": int(samples.policy_version.min()),
    }


def progress_line(metrics: dict) -> str:
    passes = " ".join(
        f"{key.removeprefix('eval/')} {value:.3f}" for key, value in metrics.items() if key.startswith("eval/pass@")
    )
    return (
        f"  eval after step {metrics['step']}: reward {metrics['eval/reward_mean']:.3f} | {passes} | "
        f"len {metrics['eval/completion_length']:.1f} | {metrics['time/eval']:.2f}s"
    )
