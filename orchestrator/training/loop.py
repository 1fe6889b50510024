"""The GRPO step loop (on-policy): generate -> reward -> advantages -> train -> sync -> record.

    python -m orchestrator train [--config FILE.yaml] [key=value ...]

Each step takes `prompts_per_step` prompts from the stream (a group each, id = stream position),
generates `num_generations` samples per group on the rollout pool, scores groups in Ray tasks as
they come back (so rewards overlap the generation of the other groups), normalises advantages
within each group, has the learner take one TRL GRPO step with the engines' logprobs as the
behaviour logprobs, and pushes the new weights to every engine before the next step generates
anything.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import signal
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from orchestrator.config.train import TrainConfig
from orchestrator.data.conversations import encode, reward_inputs
from orchestrator.data.stream import PromptStream
from orchestrator.errors import RunError
from orchestrator.rollout.groups import GroupRequest
from orchestrator.rollout.table import rollout_table, write_parquet
from orchestrator.training import plots
from orchestrator.training.advantages import group_advantages
from orchestrator.training.batch import learner_batch
from orchestrator.training.evaluation import EvalSet, Evaluation
from orchestrator.training.evaluation import progress_line as eval_progress_line
from orchestrator.training.metrics import MetricsLog, progress_line, read_metrics, rollout_metrics
from orchestrator.training.reward_batches import RewardBatches
from orchestrator.training.run_dir import ResumeState, RunDir
from orchestrator.training.trackers import make_trackers


# Names the reward call itself uses; a dataset column with one of these names is not forwarded.
RESERVED_REWARD_KWARGS = {"prompts", "completions", "completion_ids", "error_score", "group_id", "sample_index",
                          "finish_reason", "stop_reason"}


@dataclasses.dataclass
class Components:
    """What a run drives; built by `start_components`, replaced by stand-ins in tests."""

    learner: object  # Ray actor handle of workers.learner.actor.Learner
    pool: object  # orchestrator.rollout.pool.RolloutPool
    transport: object  # workers.weights.transport.WeightTransport
    tokenizer: object  # the canonical tokenizer, loaded on the driver


class GRPORun:
    def __init__(
        self,
        config: TrainConfig,
        prompts: list[str],
        run_dir: RunDir,
        components: Components,
        resume: ResumeState | None = None,
        columns: list[dict] | None = None,
        conversations: list[list[dict]] | None = None,
        eval_set: EvalSet | None = None,
    ):
        """`columns`: each prompt's other dataset columns, passed to reward functions by name.
        `conversations`: each prompt's messages when the prompts are conversations (`prompts` are
        then their rendered text). `eval_set`: held-out prompts (training/evaluation.py)."""
        self.config = config
        # Chat prompts, evaluation, trackers: data/conversations.py, training/{evaluation,trackers}.py
        self.conversations = conversations
        self.evaluation = Evaluation(config, eval_set, components.tokenizer) if eval_set is not None else None
        self.columns = columns or [{} for _ in prompts]
        self.run_dir = run_dir
        self.parts = components
        resume = resume or ResumeState(step=0, stream_position=0, policy_version=0)
        self.first_step = resume.step + 1
        self.stream = PromptStream(prompts, seed=config.seed, position=resume.stream_position)
        self.policy_version = resume.policy_version
        self.sampling = config.sampling()
        self.tool_use = config.tool_use()
        self._reward_task = None
        self._stop_requested = False
        # A control request left from before a resume is history, not a new request.
        self._control_seen = run_dir.control.stat().st_mtime_ns if run_dir.control.is_file() else None
        self._prefetch = None  # async mode: the next step's generation, running in the background
        self._prefetched_groups = 0
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        components.pool.on_engine_ready = self._sync_new_engine

    def _sync_new_engine(self, engine_id: int, actor) -> None:
        """A new or replacement engine serves only once it holds the current policy."""
        report = self.parts.transport.sync(self.parts.learner, {engine_id: actor}, self.policy_version)
        if report.dead:
            raise RuntimeError(f"engine {engine_id} died while loading the current weights")

    def run(self) -> list[dict]:
        """Run the remaining steps. Ctrl-C finishes the current step, checkpoints and returns;
        a second Ctrl-C aborts at once."""
        log = MetricsLog(self.run_dir.metrics)
        trackers = make_trackers(self.config.report_to, self.run_dir.root, self.config.model_dump(mode="json"))
        previous = signal.signal(signal.SIGINT, self._on_interrupt)
        try:
            for step in range(self.first_step, self.config.max_steps + 1):
                metrics = self.step(step)
                if self.evaluation is not None and (self.evaluation.due(step) or self._stop_requested):
                    metrics.update(self._evaluate(step))
                log.write(metrics)
                trackers.log(metrics)
                print(progress_line(metrics, self.config.max_steps), flush=True)
                if "eval/reward_mean" in metrics:
                    print(eval_progress_line(metrics), flush=True)
                last = step == self.config.max_steps or self._stop_requested
                if step % self.config.plot_steps == 0 or last:
                    plots.draw(read_metrics(self.run_dir.metrics), self.run_dir.plots)
                if (self.config.save_steps and step % self.config.save_steps == 0) or last:
                    self.save(step)
                if self._stop_requested:
                    print(f"stopped after step {step}; continue with: python -m orchestrator train --resume {self.run_dir.root}")
                    break
        finally:
            signal.signal(signal.SIGINT, previous)
            log.close()
            trackers.close()
            self._executor.shutdown(wait=True)  # a background generation finishes before the pool stops
        return read_metrics(self.run_dir.metrics)

    def _on_interrupt(self, signum, frame) -> None:
        if self._stop_requested:
            raise KeyboardInterrupt
        self._stop_requested = True
        print("\ninterrupt: finishing this step, then saving a checkpoint (Ctrl-C again to abort)", flush=True)

    def _generate(self, requests: list[GroupRequest]) -> tuple[pa.Table, tuple]:
        """The step's rollout table in request order, and (requests, their reward tasks). Groups are
        scored as they come back, while other groups still generate (several groups per task when
        they come back fast: see reward_batches.py). Runs on the thread that owns the pool (the
        generation thread in async mode), so pool changes (scaling requests, replacements) never
        race with a running `generate`."""
        self._apply_control()
        by_id = {request.group_id: request for request in requests}
        scoring = RewardBatches(lambda batch, results: self._score(rollout_table(batch, results)))
        results = self.parts.pool.generate(requests, on_result=lambda result: scoring.add(by_id[result.group_id], result))
        return rollout_table(requests, results), (requests, scoring.close())

    def _evaluate(self, step: int) -> dict:
        """The held-out prompts with the weights this step produced, generated on the thread that
        owns the pool (see `_generate`); never trained on, and the prompt stream does not move."""
        folder = self.run_dir.root / "eval"
        return self._executor.submit(self.evaluation.run, self.parts.pool.generate, step, folder).result()

    def _submit_generation(self):
        requests = self._requests(self.config.prompts_per_step)  # the stream advances on the main thread
        self._prefetched_groups = len(requests)
        return self._executor.submit(self._generate, requests)

    def _next_batch(self, step: int) -> tuple[pa.Table, tuple]:
        """On-policy (max_staleness 0): generate now. Async (max_staleness >= 1): take the batch
        generated while the previous step trained, and start generating the next one, which then
        overlaps this step's reward, training and sync."""
        if self.config.max_staleness == 0:
            return self._generate(self._requests(self.config.prompts_per_step))
        if self._prefetch is None:
            self._prefetch = self._submit_generation()
        table, score_refs = self._prefetch.result()
        self._prefetch = self._submit_generation() if step < self.config.max_steps else None
        oldest = min(table.column("policy_version").to_pylist())
        if oldest < self.policy_version - self.config.max_staleness:
            raise RunError(
                f"step {step}: a sample of policy {oldest} is older than max_staleness={self.config.max_staleness} "
                f"allows (current policy {self.policy_version})"
            )
        return table, score_refs

    def _apply_control(self) -> None:
        """Pick up `python -m orchestrator scale RUN_DIR --engines N` between steps."""
        path = self.run_dir.control
        if not path.is_file() or path.stat().st_mtime_ns == self._control_seen:
            return
        self._control_seen = path.stat().st_mtime_ns
        engines = json.loads(path.read_text()).get("engines")
        if engines is not None:
            print(f"scaling the rollout pool to {engines} engine(s)", flush=True)
            self.parts.pool.resize(int(engines))

    def step(self, step: int) -> dict:
        import ray

        start = time.perf_counter()
        table, (requests, scoring) = self._next_batch(step)
        generated = time.perf_counter()

        per_group = scoring.per_group(_unwrap)  # mostly done while generating
        scores = _merge_scores([per_group[request.group_id] for request in requests])
        rewards = np.asarray(scores["reward"])
        advantages = group_advantages(rewards, np.asarray(table.column("group_id")), self.config.scale_rewards)
        scored = time.perf_counter()

        batch = learner_batch(table, advantages, self.parts.tokenizer.pad_token_id)
        learner_metrics = ray.get(self.parts.learner.train_step.remote(batch))
        trained = time.perf_counter()

        self.policy_version += 1
        sync = self.parts.transport.sync(self.parts.learner, dict(self.parts.pool.actors), self.policy_version)
        if self._prefetch is None:  # on-policy: the pool is idle, replace dead engines now
            for engine_id, error in sync.dead.items():
                self.parts.pool.engine_died(engine_id, error)
        # (async: the generation thread owns the pool and finds the dead engine on its next request)
        synced = time.perf_counter()

        table = self._with_training_columns(table, step, scores, advantages)
        write_parquet(table, self.run_dir.rollout_file(step))
        versions = table.column("policy_version").to_pylist()
        metrics = {
            "step": step,
            "policy_version": int(min(versions)),
            "staleness/max": int(self.policy_version - 1 - min(versions)),
            **rollout_metrics(table, self.parts.tokenizer.eos_token_id, tools=self.tool_use is not None),
            **learner_metrics,
            "reward_errors": scores["reward_errors"],
            "engines": len(self.parts.pool.actors),
            "engine_restarts": self.parts.pool.restarts,
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
                prompt_ids=encode(tokenizer, item.prompt, self.conversations is not None),
                num_generations=self.config.num_generations,
                sampling=self.sampling,
                tools=self.tool_use,
            )
            for item in items
        ]

    def _score(self, table: pa.Table):
        import ray

        from orchestrator.training.rewards import score

        if self._reward_task is None:
            self._reward_task = ray.remote(score).options(num_cpus=0, max_retries=0)
        prompt_index = table.column("prompt_index").to_pylist()
        keys = [key for key in self.columns[0] if key not in RESERVED_REWARD_KWARGS]
        dataset = {key: [self.columns[i].get(key) for i in prompt_index] for key in keys}
        prompts, completions = reward_inputs(  # TRL's conversational shapes when prompts are chats
            self.conversations, prompt_index, table.column("prompt").to_pylist(), table.column("completion").to_pylist()
        )
        return self._reward_task.remote(
            self.config.reward_funcs,
            self.config.reward_weights,
            prompts,
            completions,
            table.column("completion_ids").to_pylist(),
            **dataset,
            group_id=table.column("group_id").to_pylist(),
            sample_index=table.column("sample_index").to_pylist(),
            finish_reason=table.column("finish_reason").to_pylist(),
            stop_reason=table.column("stop_reason").to_pylist(),
            error_score=self.config.reward_error_score,
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

        # A prefetched batch (async mode) is not trained on yet: a resumed run generates it again.
        prefetched = self._prefetched_groups if self._prefetch is not None else 0
        state = ResumeState(step=step, stream_position=self.stream.position - prefetched, policy_version=self.policy_version)
        return self.run_dir.write_checkpoint(step, lambda folder: ray.get(self.parts.learner.save.remote(folder)), state)


def _merge_scores(per_group: list[dict]) -> dict:
    """One step's scores from its groups' (in request order): lists concatenated, counts summed."""
    merged = {}
    for scores in per_group:
        for key, value in scores.items():
            if key == "reward_errors":
                merged[key] = merged.get(key, 0) + value
            else:  # extend in place: concatenating copies the whole list for every group
                merged.setdefault(key, []).extend(value)
    return merged


def _unwrap(ref):
    """ray.get, re-raising a user-facing error from a task as itself (no Ray traceback)."""
    import ray

    from orchestrator.errors import UserError

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, UserError):
            raise error.cause from None
        raise


def start_components(
    config: TrainConfig,
    model: str,
    tokenizer: str,
    resume_from: str | None = None,
    policy_version: int = 0,
    max_prompt_tokens: int | None = None,
) -> Components:
    """Start the learner, take the canonical tokenizer and model config from it, and start the pool
    on them: engines start with placeholder weights and serve only after the learner's weights
    (`policy_version`) are loaded into them, so no node but the learner's needs the model files."""
    import ray
    from transformers import AutoTokenizer

    from orchestrator.placement.labels import LEARNER_ROLE
    from orchestrator.placement.placement import detect
    from orchestrator.ray_runtime import cluster_has_gpus, init_ray
    from orchestrator.rollout.pool import RolloutPool
    from workers.learner.actor import Learner
    from workers.weights.transport import make_transport

    rollout = config.rollout
    init_ray(num_cpus=rollout.engines * rollout.num_cpus_per_engine + config.learner.num_cpus + 1)
    placement = detect()
    options, _ = placement.actor_options(LEARNER_ROLE, config.learner.num_cpus, config.learner.num_gpus, rollout.startup_timeout_s)
    learner = ray.remote(Learner).options(**options).remote(config, model, tokenizer, resume_from)
    bundle = ray.get(learner.canonical_tokenizer.remote())
    with tempfile.TemporaryDirectory(prefix="canonical-tokenizer-") as folder:
        canonical = AutoTokenizer.from_pretrained(bundle.write_to(Path(folder)))
    device = "cuda" if cluster_has_gpus() else "cpu"
    transport = make_transport(device, config.weight_sync.timeout_s, config.weight_sync.bucket_mb << 20, rollout.tensor_parallel_size)
    pool = RolloutPool(None, canonical, rollout, seed=config.seed, engine_tokenizer=bundle, placement=placement)
    if device == "cpu":
        longest_prompt = max_prompt_tokens or config.max_prompt_length or 0
        pool.size_for(json.loads(bundle.files["config.json"]), config.samples_per_step, longest_prompt + config.max_completion_length)
    if device == "cpu":  # each engine loads the weights as it is admitted
        pool.on_engine_ready = lambda engine_id, actor: transport.sync(learner, {engine_id: actor}, policy_version)
        pool.start()
    else:  # one NCCL group for every engine: admit them all, then sync them together before any request
        pool.start()
        transport.sync(learner, dict(pool.actors), policy_version)
    return Components(learner=learner, pool=pool, transport=transport, tokenizer=canonical)
