"""The GRPO step loop (on-policy): generate -> reward -> advantages -> train -> sync -> record.

    python -m orchestrator train [--config FILE.yaml] [key=value ...]

Each step takes `prompts_per_step` prompts from the stream (a group each, id = stream position),
generates `num_generations` samples per group on the rollout pool, scores them in a Ray task,
normalises advantages within each group, has the learner take one TRL GRPO step with the engines'
logprobs as the behaviour logprobs, and pushes the new weights to every engine before the next
step generates anything.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from orchestrator.config.train import TrainConfig
from orchestrator.data.stream import PromptStream
from orchestrator.rollout.groups import GroupRequest
from orchestrator.rollout.table import rollout_table, write_parquet
from orchestrator.training import plots
from orchestrator.training.advantages import group_advantages
from orchestrator.training.batch import learner_batch
from orchestrator.training.metrics import MetricsLog, progress_line, read_metrics, rollout_metrics
from orchestrator.training.run_dir import RunDir


@dataclasses.dataclass
class Components:
    """What a run drives; built by `start_components`, replaced by stand-ins in tests."""

    learner: object  # Ray actor handle of workers.learner.actor.Learner
    pool: object  # orchestrator.rollout.pool.RolloutPool
    transport: object  # workers.weights.transport.WeightTransport
    tokenizer: object  # the canonical tokenizer, loaded on the driver


class GRPORun:
    def __init__(self, config: TrainConfig, prompts: list[str], run_dir: RunDir, components: Components):
        self.config = config
        self.run_dir = run_dir
        self.parts = components
        self.stream = PromptStream(prompts, seed=config.seed)
        self.sampling = config.sampling()
        self.policy_version = 0
        self._reward_task = None

    def run(self) -> list[dict]:
        log = MetricsLog(self.run_dir.metrics)
        try:
            for step in range(1, self.config.max_steps + 1):
                metrics = self.step(step)
                log.write(metrics)
                print(progress_line(metrics, self.config.max_steps), flush=True)
                if step % self.config.plot_steps == 0 or step == self.config.max_steps:
                    plots.draw(read_metrics(self.run_dir.metrics), self.run_dir.plots)
                if (self.config.save_steps and step % self.config.save_steps == 0) or step == self.config.max_steps:
                    self.save(step)
        finally:
            log.close()
        return read_metrics(self.run_dir.metrics)

    def step(self, step: int) -> dict:
        import ray

        start = time.perf_counter()
        requests = self._requests(self.config.prompts_per_step)
        results = self.parts.pool.generate(requests)
        table = rollout_table(requests, results)
        generated = time.perf_counter()

        scores = ray.get(self._score(table))
        rewards = np.asarray(scores["reward"])
        advantages = group_advantages(rewards, np.asarray(table.column("group_id")), self.config.scale_rewards)
        scored = time.perf_counter()

        batch = learner_batch(table, advantages, self.parts.tokenizer.pad_token_id)
        learner_metrics = ray.get(self.parts.learner.train_step.remote(batch))
        trained = time.perf_counter()

        self.policy_version += 1
        sync = self.parts.transport.sync(self.parts.learner, self.parts.pool.actors, self.policy_version)
        synced = time.perf_counter()

        table = self._with_training_columns(table, step, scores, advantages)
        write_parquet(table, self.run_dir.rollout_file(step))
        metrics = {
            "step": step,
            "policy_version": int(min(table.column("policy_version").to_pylist())),
            **rollout_metrics(table, self.parts.tokenizer.eos_token_id),
            **learner_metrics,
            "weight_sync/bytes": sync.bytes,
            "weight_sync/checksum": sync.checksum,
            "time/generate": generated - start,
            "time/reward": scored - generated,
            "time/train": trained - scored,
            "time/sync": synced - trained,
        }
        metrics["time/step"] = time.perf_counter() - start
        metrics["samples_per_s"] = table.num_rows / metrics["time/step"]
        return metrics

    def _requests(self, count: int) -> list[GroupRequest]:
        tokenizer = self.parts.tokenizer
        items = self.stream.take(count)
        return [
            GroupRequest(
                group_id=item.group_id,
                prompt_index=item.prompt_index,
                prompt=item.prompt,
                prompt_ids=tokenizer(item.prompt)["input_ids"],
                num_generations=self.config.num_generations,
                sampling=self.sampling,
            )
            for item in items
        ]

    def _score(self, table: pa.Table):
        import ray

        from orchestrator.training.rewards import score

        if self._reward_task is None:
            self._reward_task = ray.remote(score).options(num_cpus=0, max_retries=0)
        return self._reward_task.remote(
            self.config.reward_funcs,
            self.config.reward_weights,
            table.column("prompt").to_pylist(),
            table.column("completion").to_pylist(),
            table.column("completion_ids").to_pylist(),
            group_id=table.column("group_id").to_pylist(),
            sample_index=table.column("sample_index").to_pylist(),
            finish_reason=table.column("finish_reason").to_pylist(),
            stop_reason=table.column("stop_reason").to_pylist(),
        )

    @staticmethod
    def _with_training_columns(table: pa.Table, step: int, scores: dict, advantages: np.ndarray) -> pa.Table:
        table = table.add_column(0, "step", pa.array([step] * table.num_rows, pa.int64()))
        table = table.append_column("reward", pa.array(scores["reward"], pa.float64()))
        table = table.append_column("advantage", pa.array(advantages, pa.float64()))
        for name, values in scores.items():
            if name.startswith("rewards/"):
                table = table.append_column(name, pa.array(values, pa.float64()))
        return table

    def save(self, step: int) -> Path:
        import ray

        folder = self.run_dir.checkpoint(step)
        ray.get(self.parts.learner.save.remote(str(folder)))
        return folder


def start_components(config: TrainConfig, model: str, tokenizer: str) -> Components:
    """Start the learner, take the canonical tokenizer from it, start the pool on that tokenizer."""
    import ray
    from transformers import AutoTokenizer

    from orchestrator.ray_runtime import init_ray
    from orchestrator.rollout.pool import RolloutPool
    from workers.learner.actor import Learner
    from workers.weights.transport import make_transport

    rollout = config.rollout
    init_ray(num_cpus=rollout.engines * rollout.num_cpus_per_engine + config.learner.num_cpus + 1)
    learner = ray.remote(Learner).options(num_cpus=config.learner.num_cpus, num_gpus=config.learner.num_gpus).remote(
        config, model, tokenizer
    )
    bundle = ray.get(learner.canonical_tokenizer.remote())
    with tempfile.TemporaryDirectory(prefix="canonical-tokenizer-") as folder:
        canonical = AutoTokenizer.from_pretrained(bundle.write_to(Path(folder)))
    pool = RolloutPool(model, canonical, rollout, seed=config.seed, engine_tokenizer=bundle).start()
    transport = make_transport(
        pool.device, config.weight_sync.timeout_s, config.weight_sync.bucket_mb << 20, rollout.tensor_parallel_size
    )
    return Components(learner=learner, pool=pool, transport=transport, tokenizer=canonical)
