"""The GRPO step loop: generate -> reward -> advantages -> train -> sync -> record.

    python -m orchestrator train [--config FILE.yaml] [key=value ...]

Each step takes `prompts_per_step` prompts from the stream (a group each, id = stream position;
requests.py), generates `num_generations` samples per group on the rollout pool, scores groups in
Ray tasks as they come back (rewards/scoring.py: rewards overlap the generation of the other groups),
normalises advantages within each group, has the learner take TRL GRPO steps on the batch (its
importance-sampling correction weighs the engines' logprobs against its own), and pushes the new
weights to every engine. On-policy
(`max_staleness: 0`) the next step generates only after that sync; in async mode (`max_staleness: N`,
prefetch.py) up to N steps' batches generate while this step trains, at most N policy versions behind
(staleness.py).
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

import numpy as np

from orchestrator import stopping
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import LearnerDiedError, RunError, Terminated
from orchestrator.data.stream import prompt_stream
from orchestrator.launch import Components
from orchestrator.log import log
from orchestrator.rewards.scoring import RewardScorer, StepRewards
from orchestrator.rollout.autoscale import Autoscaler, StepTimings
from orchestrator.rollout.continued import ROLLOUT_REWORK
from orchestrator.rollout.parquet import rollout_table, write_parquet
from orchestrator.rollout.samples import StepSamples
from orchestrator.training import dynamic_sampling, plots, staleness
from orchestrator.training.advantages import group_advantages
from orchestrator.training.batch import learner_batch
from orchestrator.training.busy import BusyClock
from orchestrator.training.control import ControlFile
from orchestrator.training.evaluation import Evaluation
from orchestrator.training.evaluation import progress_line as eval_progress_line
from orchestrator.training.metrics import MetricsLog, progress_line, read_metrics, rollout_metrics, source_metrics
from orchestrator.training.prefetch import Prefetcher
from orchestrator.training.requests import PromptSet, build_requests
from orchestrator.training.run_dir import ResumeState, RunDir, resume_hint
from orchestrator.training.trackers import Trackers, make_trackers


class GRPORun:
    def __init__(
        self, config: TrainConfig, data: PromptSet, run_dir: RunDir, components: Components, resume: ResumeState | None = None
    ):
        """`data`: the prompts as preflight checked them; `resume`: where a stopped run's checkpoint stood."""
        self.config = config
        self.data = data
        reward_models = components.reward_models.workers if components.reward_models is not None else None
        judges = components.judges.clients() if components.judges is not None else None
        self.evaluation = (
            Evaluation(config, data.eval_set, reward_models, judges, data.environment) if data.eval_set is not None else None
        )
        self.run_dir = run_dir
        self.components = components
        resume = resume or ResumeState(step=0, stream_position=0, policy_version=0)
        self.first_step = resume.step + 1
        self.stream = prompt_stream(data, config.seed, resume.stream_position)
        self.weights = components.weights  # its version is the policy version: resume.policy_version here
        self.sampling = config.sampling()
        self.tool_use = config.tool_use()
        self.agent_use = config.agent_use()  # its token: every gateway call of this run carries it
        plan = config.reward_plan
        self.scorer = RewardScorer(
            list(plan.specs),
            list(plan.weights),
            config.reward_error_score,
            data.columns,
            config.reward_batch_samples,
            data.conversations,
            timeout_s=config.reward_timeout_s,
            num_cpus=config.reward_num_cpus,
            reward_models=reward_models,
            judges=judges,
            environment=data.environment,
            plan=plan,
            row_sources=None if data.sources is None else [data.sources.names[i] for i in data.sources.of_rows],
        )
        self._stop = stopping.GracefulStop()  # entered by `run`
        self._learner_restarts = 0
        self._learner_drains = 0  # learners moved off a node Ray was draining
        self._control = ControlFile(run_dir.control)
        settings = config.rollout.autoscale
        self.autoscaler = Autoscaler(settings, config.rollout.engines) if settings is not None else None
        # Sizes passed between the main thread (the autoscaler) and the one that owns the pool (async: the
        # generation thread), under `_sizing`: the autoscaler's target to apply, and a `scale` request applied.
        self._sizing = threading.Lock()
        self._resize_to: int | None = None
        self._scaled_to: int | None = None
        self._drained = 0  # engines drained for their node before this step (pool.drained)
        self._rework = collections.Counter()  # pool.rework's counts before this step
        self._trackers = Trackers([])  # `run` opens the configured ones
        self._generating = BusyClock()  # the pool's time in `generate`, on whichever thread calls it
        self._prefetch = Prefetcher(self._generate)

    def run(self) -> list[dict]:
        """Run the remaining steps. Ctrl-C or SIGTERM finishes the current step, checkpoints and stops
        (stopping.py; SIGTERM then raises `Terminated`); a second one aborts at once. A learner that
        dies is restarted from the last checkpoint (`learner.max_restarts`) and the steps after it run
        again, or the run stops saying how to resume."""
        self._log = MetricsLog(self.run_dir.metrics)
        self._trackers = make_trackers(
            self.config.report_to, self.run_dir.root, self.config.model_dump(mode="json"), after_step=self.first_step - 1
        )
        self._stop.install()
        try:
            step = self.first_step
            while step <= self.config.max_steps:
                try:
                    saved = self._run_step(step)
                    if not self._stop.requested and step < self.config.max_steps:
                        self._leave_a_draining_node(step, saved)
                except LearnerDiedError as death:
                    step = self._restart_learner(death, step) + 1
                    continue
                except OSError as error:  # a full disk: one line naming the file and how to resume
                    self.run_dir.raise_if_disk_full(error, error.filename)
                    raise
                if self._stop.requested:
                    if not saved:  # asked after this step decided not to checkpoint
                        self.save(step)
                    resume = f"continue with: {self.run_dir.resume_command}"
                    if self._stop.requested == "SIGTERM":
                        raise Terminated(f"terminated (SIGTERM): stopped after step {step}, checkpoint saved; {resume}")
                    log.info(f"stopped after step {step}; {resume}")
                    break
                step += 1
        finally:
            self._stop.restore()
            self._log.close()
            self._prefetch.shutdown()
            self._trackers.close()  # never raises: a tracker cannot hide the error that ended the run
        return read_metrics(self.run_dir.metrics)

    def _run_step(self, step: int) -> bool:
        """One step, recorded (metrics line, trackers, progress line, plots) and checkpointed when due;
        returns whether it wrote a checkpoint. Ctrl-C evaluates before it stops; SIGTERM, whose sender
        waits only so long, does not."""
        metrics = self.step(step)
        if self.evaluation is not None and (self.evaluation.due(step) or self._stop.requested == "SIGINT"):
            metrics.update(self._evaluate(step))
        self._log.write(metrics)
        log.info(progress_line(metrics, self.config.max_steps))
        if "eval/reward_mean" in metrics:
            log.info(eval_progress_line(metrics))
        last = step == self.config.max_steps or self._stop.requested
        if step % self.config.plot_steps == 0 or last:
            plots.draw(read_metrics(self.run_dir.metrics), self.run_dir.plots)
        saved = bool(self.config.save_steps and step % self.config.save_steps == 0) or bool(last)
        if saved:
            self.save(step)
        self._trackers.log(metrics)  # after the checkpoint: a slow or failing tracker never delays or loses it
        return saved

    def _restart_learner(self, death: LearnerDiedError, step: int) -> int:
        """Replace a dead learner by one loaded from the last checkpoint, reload every engine with its
        weights, rewind the prompt stream, and forget what was recorded after it; returns the
        checkpoint's step (the run goes on from the next). Without restarts left, stop the run
        with the command that resumes it."""
        saved = self.run_dir.latest_checkpoint() if any(self.run_dir.checkpoints.glob("step-*[0-9]")) else None
        if self._learner_restarts >= self.config.learner.max_restarts:
            raise RunError(f"step {step}: {death}; {resume_hint(self.run_dir, saved)}") from None
        self._learner_restarts += 1
        checkpoint, state = saved or (None, ResumeState(step=0, stream_position=0, policy_version=0))
        log.warning(
            f"step {step}: {death}; restarting it from {checkpoint.name if checkpoint else 'the initial model'} "
            f"(learner restart {self._learner_restarts} of learner.max_restarts={self.config.learner.max_restarts})"
        )
        self._replace_learner(checkpoint, state)
        return state.step

    def _leave_a_draining_node(self, step: int, saved: bool) -> None:
        """A learner whose node Ray is draining (a preemption notice, `ray drain-node`) is moved before
        the node goes: checkpointed now (unless this step just did), then started again from that
        checkpoint on a node not draining, the learner-restart path with nothing to run again. Not
        counted against learner.max_restarts. A colocated learner is not moved: its bundle holds its engine's
        GPU too, and goes with the node (Ray places the group again; the learner then restarts as a dead one)."""
        from orchestrator.placement.placement import draining_nodes

        if self.components.colocation is not None:
            return
        leaving = draining_nodes()
        nodes = [node for node in self.components.learner.node_ids() if node in leaving] if leaving else []
        if not nodes:
            return
        left_s = min(leaving[node] for node in nodes) - time.time()
        if not saved:
            self.save(step)
        checkpoint, state = self.run_dir.latest_checkpoint()
        self._learner_drains += 1
        log.warning(
            f"step {step}: the learner's node {nodes[0][:12]} is being drained by Ray ("
            + (f"deadline in {left_s:.0f}s" if left_s < float("inf") else "no deadline")
            + f"); checkpointed as {checkpoint.name}, starting the learner again on another learner node"
        )
        self._replace_learner(checkpoint, state)

    def _replace_learner(self, checkpoint: Path | None, state: ResumeState) -> None:
        """A new learner from `checkpoint` (None: the initial model): generation ahead is discarded, the
        record and the prompt stream rewound to `state`, and every engine loads its weights."""
        try:
            self._prefetch.discard()  # async: the batches generated ahead come from the rewound stream again
        except LearnerDiedError:
            pass  # it was admitting an engine, whose weights come from the dead learner: discarded anyway
        self.components.learner.restart(str(checkpoint) if checkpoint else None)
        self.weights.learner_replaced(state.policy_version)
        self._log.close()
        self.run_dir.forget_after(state.step)
        self._log = MetricsLog(self.run_dir.metrics)
        self._trackers.rewind(state.step)
        self.stream.position = state.stream_position
        self.components.pool.sync_weights(self.weights)

    def _generate(self, requests) -> tuple[StepSamples, StepRewards]:
        """The step's samples in request order, and its rewards (reward tasks started as groups came
        back). Runs on the thread that owns the pool (the generation thread in async mode), so
        pool changes (scaling requests, replacements) never race with a running `generate`."""
        self._apply_control()
        rewards = self.scorer.begin(requests)
        with self._generating.busy():
            results = self.components.pool.generate(requests, on_result=rewards.add)
        return StepSamples.assemble(requests, results), rewards.close()

    def _evaluate(self, step: int) -> dict:
        """The held-out prompts with the weights this step produced, generated on the thread that
        owns the pool (see `_generate`); never trained on, and the prompt stream does not move."""
        return self._prefetch.call(self.evaluation.run, self.components.pool, step, self.run_dir.root / "eval")

    def _requests(self, groups: int | None = None):
        items = self.stream.take(groups or self.config.prompts_per_step)
        return build_requests(items, self.data, self.config.num_generations, self.sampling, self.tool_use, self.agent_use)

    def _next_batch(self, step: int) -> tuple[list, StepSamples, StepRewards]:
        """(requests, samples, rewards) of the step. On-policy (max_staleness 0): generated now. Async
        (max_staleness N): the oldest of the batches generated ahead, and the next ones submitted so that
        N are ahead, each overlapping the steps that train before it (never past max_steps)."""
        if self.config.max_staleness == 0:
            requests = self._requests()
            return requests, *self._generate(requests)
        if not self._prefetch.running:
            self._prefetch.submit(self._requests())  # the stream advances on the main thread
        requests, (samples, rewards) = self._prefetch.take()
        while self._prefetch.batches_ahead < min(self.config.max_staleness, self.config.max_steps - step):
            self._prefetch.submit(self._requests())
        return requests, samples, rewards

    def _renew_stale(self, step: int, requests: list, samples: StepSamples) -> tuple[StepSamples, int, int]:
        """Groups over the staleness bound generated again on the current policy (staleness.py); returns
        the samples, the groups renewed and the reward errors of their new samples."""
        stale = staleness.stale_groups(samples, self.weights.version, self.config.max_staleness)
        if not stale:
            return samples, 0, 0
        log.warning(
            f"step {step}: {len(stale)} group(s) were generated more than max_staleness="
            f"{self.config.max_staleness} policy versions ago; generating them again on policy {self.weights.version}"
        )
        stale_ids = set(stale)
        again = [request for request in requests if request.group_id in stale_ids]
        fresh, rewards = self._prefetch.call(self._generate, again)
        scores = rewards.scores()
        fresh.set_scores(scores)
        return staleness.replace_groups(samples, fresh), len(stale), scores["reward_errors"]

    def _apply_control(self) -> None:
        """Pick up `python -m orchestrator scale RUN_DIR --engines N`, or else the autoscaler's target,
        between steps."""
        request = self._control.poll()
        asked = self._within_bounds(int(request["engines"])) if request and request.get("engines") is not None else None
        with self._sizing:
            if asked is not None:  # the autoscaler goes on from it, after its cooldown (`_autoscale`)
                target, self._scaled_to, self._resize_to = asked, asked, None
            else:
                target, self._resize_to = self._resize_to, None
        if target is not None:
            if asked is not None:
                log.info(f"scaling the rollout pool to {asked} engine(s)")
            self.components.pool.resize(target)

    def _within_bounds(self, engines: int) -> int:
        """A `scale` request, held within rollout.autoscale's bounds when the run autoscales."""
        if self.autoscaler is None:
            return engines
        bounds = self.autoscaler.settings
        kept = max(bounds.min_engines, min(bounds.max_engines, engines))
        if kept != engines:
            log.warning(
                f"scale: {engines} engine(s) is outside rollout.autoscale's [{bounds.min_engines}, {bounds.max_engines}]; using {kept}"
            )
        return kept

    def _rollout_metrics(self, samples: StepSamples) -> dict:
        eos = self.components.tokenizer.eos_token_id
        tools = self.tool_use is not None or self.data.environment is not None
        metrics = rollout_metrics(samples, eos, tools=tools, agent=self.agent_use is not None)
        return metrics if self.data.sources is None else {**metrics, **source_metrics(samples, self.data.sources)}

    def step(self, step: int) -> dict:
        start, generating = time.perf_counter(), self._generating.seconds()
        requests, samples, rewards = self._next_batch(step)
        generated = time.perf_counter()

        scores = rewards.scores()
        samples.set_scores(scores)
        reward_errors, figures, extra_generate_s = scores["reward_errors"], {}, 0.0
        if self.config.max_staleness:
            samples, renewed, errors = self._renew_stale(step, requests, samples)
            reward_errors += errors
            figures["staleness/regenerated_groups"] = renewed
        if self.config.dynamic_sampling:  # on-policy only (config/train.py)
            samples, reward_errors, figures, extra_generate_s = self._fill(step, samples, reward_errors)
        trained = samples if samples.filtered is None else samples.take(np.flatnonzero(~samples.filtered))
        trained.advantage = group_advantages(trained.reward, trained.group_id, self.config.scale_rewards, trained.sessions())
        if samples.filtered is not None:  # the filtered samples are reported, with no advantage
            samples.advantage = np.full(len(samples), np.nan)
            samples.advantage[~samples.filtered] = trained.advantage
        scored = time.perf_counter()

        batch = learner_batch(
            trained,
            trained.advantage,
            self.components.tokenizer.pad_token_id,
            self.config.mask_truncated_completions,
            learner_version=self.weights.version,
        )
        learner_metrics = self.components.learner.train_step(batch, trained.group_id)
        learned = time.perf_counter()

        self.weights.version += 1
        # Async: the generation thread owns the pool, and replaces a dead engine when its next call fails.
        sync = self.components.pool.sync_weights(self.weights, replace_now=not self._prefetch.running)
        synced = time.perf_counter()

        write_parquet(rollout_table(samples, step), self.run_dir.rollout_file(step))
        metrics = {
            "step": step,
            "policy_version": int(samples.policy_version.min()),
            **staleness.figures(samples, learner_version=self.weights.version - 1),
            **self._rollout_metrics(samples),
            **learner_metrics,
            **figures,
            "reward_errors": reward_errors,
            "engines": self.components.pool.size,
            "engine_restarts": self.components.pool.restarts,
            **sync.figures(),
            "time/generate": generated - start + extra_generate_s,
            "time/reward": scored - generated - extra_generate_s,
            "time/train": learned - scored,
            "time/sync": synced - learned,
            # Async: generation of the next batches overlaps this step, so time/pool_busy exceeds time/generate.
            "time/pool_busy": self._generating.seconds() - generating,
            **(self.components.judges.metrics() if self.components.judges is not None else {}),
        }
        metrics["time/step"] = time.perf_counter() - start
        metrics["samples_per_s"] = len(samples) / metrics["time/step"]
        return {**metrics, **self._autoscale(metrics, round(metrics["completion_length/mean"] * len(samples)))}

    def _reworked(self) -> dict:
        """Samples continued on another engine, and generated again, since the last step (continued.py)."""
        counts = self.components.pool.rework.counts
        step = {key: counts[key] - self._rework[key] for key in ROLLOUT_REWORK}
        self._rework = collections.Counter(counts)
        return {f"rollout/{key}": value for key, value in step.items()}

    def _autoscale(self, metrics: dict, tokens: int) -> dict:
        """The pool's figures for the step and, with `rollout.autoscale`, the autoscaler's decision; a
        resize is applied where scaling requests are (`_apply_control`), before the next generation."""
        pool, step_s, drained_so_far = self.components.pool, metrics["time/step"], self.components.pool.drained
        drained, self._drained = drained_so_far - self._drained, drained_so_far
        figures = {
            "rollout/engines": pool.serving,
            "rollout/engines_pending": pool.pending,
            "rollout/engines_drained": drained,
            "learner/drains": self._learner_drains,
            "rollout/idle_fraction": max(0.0, 1.0 - metrics["time/pool_busy"] / step_s) if step_s > 0 else 0.0,
            **self._reworked(),
            "learner/wait_s": metrics["time/generate"],
        }
        if self.autoscaler is None:
            return figures
        if metrics["step"] == self.first_step:  # engines warm up (and compile) on their first batch
            return {
                **figures,
                "autoscale/target": self.autoscaler.target,
                "autoscale/decision": 0,
                "autoscale/reason": "first step: not measured",
            }
        with self._sizing:
            scaled, self._scaled_to = self._scaled_to, None
        if scaled is not None:
            self.autoscaler.resized(scaled)
        timings = StepTimings(metrics["time/generate"], step_s, tokens, metrics["time/pool_busy"])
        decision = self.autoscaler.decide(timings, serving=pool.serving, pending=pool.pending)
        if decision.change:
            log.info(f"autoscale: {decision.target} engine(s): {decision.reason}")
            with self._sizing:
                self._resize_to = decision.target
        return {
            **figures,
            "autoscale/target": decision.target,
            "autoscale/decision": decision.change,
            "autoscale/reason": decision.reason,
        }

    def _fill(self, step: int, samples: StepSamples, reward_errors: int):
        """Dynamic sampling (training/dynamic_sampling.py): more groups from the stream until the step has
        `prompts_per_step` whose rewards differ; a short step is said once."""
        config = self.config
        filled = dynamic_sampling.fill(
            samples,
            reward_errors,
            lambda groups: self._generate(self._requests(groups)),
            config.prompts_per_step,
            config.dynamic_sampling_max_rounds,
            at_least=config.learner.workers,
        )
        if filled.figures["dynamic_sampling/short_steps"]:
            log.warning(
                f"step {step}: {filled.informative} of prompts_per_step={config.prompts_per_step} groups have "
                f"rewards that differ after dynamic_sampling_max_rounds={config.dynamic_sampling_max_rounds} extra "
                f"rounds; the step trains on {dynamic_sampling.count_groups(filled.samples.group_id, ~filled.samples.filtered)}"
            )
        return filled.samples, filled.reward_errors, filled.figures, filled.generate_s

    def save(self, step: int) -> Path:
        # A prefetched batch (async mode) is not trained on yet: a resumed run generates it again.
        position = self.stream.position - self._prefetch.groups_ahead
        state = ResumeState(step, position, self.weights.version, learner_fsdp=self.config.learner.fsdp)
        return self.run_dir.write_checkpoint(step, self.components.learner.save, state, keep=self.config.save_total_limit)
