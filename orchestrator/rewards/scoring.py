"""A step's rewards: groups handed to reward tasks as they come back, scores merged in request order.

    scorer = RewardScorer(reward_funcs, reward_weights, error_score, columns, timeout_s=reward_timeout_s)
    rewards = scorer.begin(requests)          # once per step: a StepRewards
    pool.generate(requests, on_result=rewards.add)
    scores = rewards.close().scores()         # {"reward": [...], "rewards/<fn>": [...], "reward_errors": n}

Each reward task gets TRL's arguments for its groups (prompts, completions, completion_ids), our
per-sample fields (group_id, sample_index, finish_reason, stop_reason), and the prompt file's other
columns by name, built straight from the results: no table per task. It also gets the reward files
as the driver read them before the run started (`user_files`), so a task on any node runs that code,
whatever the node's disk holds. `train` and `simulate` both score through these classes, so the
simulation measures exactly what a training step does.

Groups are scored while the others still generate, several groups per reward task. A reward task per
group would start scoring the moment a group is back, but each Ray task costs milliseconds of
scheduling and a worker process's time whatever it scores, and on a small machine it takes that time
from the engines: at hundreds of groups per second the tasks fall behind generation, and on a small
step the overlap saves less than the tasks cost. Here a task starts once `min_samples` samples wait
(`reward_batch_samples`), and at most `max_tasks` run at once; groups that come back meanwhile wait
on the driver and go together in the next task. Whatever still waits when generation ends is scored
then. So a step smaller than `min_samples` is scored in one task at the end, and a large one
overlaps generation with tasks that grow instead of multiplying.

Every task has a deadline (`reward_timeout_s`), kept by the driver: a reward function that hangs
cannot stop itself, so waiting for a task's scores waits only until its deadline, and a task past it
is cancelled and scored by `RewardScorer.timed_out` (an error, or `reward_error_score`).

A task whose worker process dies (the kernel's OOM killer, a lost node, a stray kill) runs once more,
within the same deadline; one that raises, or that its deadline cancelled, is never rerun.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from orchestrator.contracts.environments import EnvironmentUse
from orchestrator.contracts.errors import RunError, UserError
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.reward_plan import RewardPlan

PROCESS_RETRIES = 1  # reruns of a reward task whose worker process died

# Names the reward call itself uses; a dataset column with one of these names is not forwarded.
RESERVED_REWARD_KWARGS = {
    "prompts",
    "completions",
    "completion_ids",
    "error_score",
    "group_id",
    "sample_index",
    "finish_reason",
    "stop_reason",
    "user_files",
    "reward_models",
    "judges",
    "agent_reward",
    "sample_errors",
    "environment_reward",
    "environment_class",
    "rows_of",
}


class RewardScorer:
    def __init__(
        self,
        reward_funcs: list[str],
        reward_weights: list[float] | None,
        error_score: float | None,
        columns: Sequence[dict] | None = None,
        batch_samples: int = 1,
        conversations: list[list[dict]] | None = None,
        timeout_s: float | None = None,
        num_cpus: float = 0.0,
        reward_models: list | None = None,
        judges: dict | None = None,
        environment: EnvironmentUse | None = None,
        plan: RewardPlan | None = None,
        row_sources: Sequence[str] | None = None,
    ):
        """`columns[i]`: prompt i's other dataset columns (reward functions get them as kwargs; a
        dataset's stay in Arrow until a task reads its rows: data/prompt_data.py's ArrowRows);
        `batch_samples`: samples per reward task while generation runs (see above);
        `conversations[i]`: prompt i's messages when the prompts are conversations: reward functions
        then get TRL's conversational shapes (the message lists, and each completion as
        `[{"role": "assistant", "content": ...}]`) instead of the rendered texts;
        `timeout_s`: each reward task's deadline (`reward_timeout_s`; None: none); `num_cpus`: the Ray CPUs
        each task reserves (`reward_num_cpus`); `reward_models`: the reward-model workers
        (rewards/models.py), when reward_funcs names models; `judges`: {name: Judge} (orchestrator/judges/),
        each reward function's `judges` argument; `environment`: the run's TRL environments, each class that
        defines get_reward one more reward named after it, with weight 1 (TRL's); `plan`: which functions
        score which sources' rows (contracts/reward_plan.py) and `row_sources[i]`, prompt i's source (None:
        every function scores every row)."""
        from orchestrator.environments import reward_specs
        from orchestrator.rewards.functions import ship

        self.num_cpus = num_cpus
        self.reward_models = reward_models
        self.judges = judges
        owned = reward_specs(environment)
        self.environment = environment
        self.plan, self.row_sources = plan, row_sources
        self.reward_funcs = [*reward_funcs, *owned]
        if reward_weights is not None:
            reward_weights = [*reward_weights, *[1.0] * len(owned)]
        self.files = ship(reward_funcs)  # the reward files as the driver read them: each task loads these
        self.conversations = conversations
        self.batch_samples = batch_samples
        self.reward_weights = reward_weights
        self.error_score = error_score
        self.timeout_s = timeout_s
        self.columns = columns or []
        self.dataset_keys = [key for key in (self.columns[0] if self.columns else {}) if key not in RESERVED_REWARD_KWARGS]
        self._task = None

    def begin(self, requests: list[GroupRequest]) -> StepRewards:
        return StepRewards(
            self.submit, requests, min_samples=self.batch_samples, timeout_s=self.timeout_s, timed_out=self.timed_out
        )

    def submit(self, requests: list[GroupRequest], results: list[GroupResult]):
        """Start one reward task over these groups (rows: each group's `scored_samples` in order); its ObjectRef."""
        import ray

        from orchestrator.rewards.functions import score

        if self._task is None:  # a task whose worker process dies runs once more (raising is not retried)
            options = dict(num_cpus=self.num_cpus, max_retries=PROCESS_RETRIES, **_on_driver_node(self.num_cpus))
            self._task = ray.remote(score).options(**options)
        fields = {
            name: []
            for name in (
                "prompts",
                "completions",
                "completion_ids",
                "group_id",
                "sample_index",
                "finish_reason",
                "stop_reason",
                "sample_errors",
                *self.dataset_keys,
            )
        }
        agent = bool(requests) and requests[0].agent is not None
        if agent:  # what each session's agent returned, for builtin:agent_reward
            fields.update(agent_reward=[])
        if self.environment is not None:  # what each sample's environment's get_reward returned, and its class
            fields.update(environment_reward=[], environment_class=[])
        for request, result in zip(requests, results):
            row = self.columns[request.prompt_index] if self.dataset_keys else None
            prompt = request.prompt if self.conversations is None else self.conversations[request.prompt_index]
            for sample in scored_samples(result.samples):
                fields["prompts"].append(prompt if sample.prompt_messages is None else sample.prompt_messages)
                fields["completions"].append(self._completion(sample))
                if agent:
                    fields["agent_reward"].append(sample.reward)
                if self.environment is not None:
                    fields["environment_reward"].append(sample.reward)
                    fields["environment_class"].append(_class_name(request))
                fields["completion_ids"].append(sample.completion_ids)
                fields["group_id"].append(request.group_id)
                fields["sample_index"].append(sample.sample_index)
                fields["finish_reason"].append(sample.finish_reason)
                fields["stop_reason"].append(sample.stop_reason)
                fields["sample_errors"].append(sample.error)  # failed before scoring (`score` scores or stops)
                for key in self.dataset_keys:
                    fields[key].append(row.get(key))
        return self._task.remote(
            self.reward_funcs,
            self.reward_weights,
            error_score=self.error_score,
            user_files=self.files,
            reward_models=self.reward_models,
            judges=self.judges,
            rows_of=self._rows_of(requests, results),
            **fields,
        )

    def _rows_of(self, requests: list[GroupRequest], results: list[GroupResult]) -> dict[str, list[int]] | None:
        """Each function's rows in a task, when sources have functions of their own (else None: all)."""
        if self.plan is None or not self.plan.own:
            return None
        sources = [
            None if self.row_sources is None else self.row_sources[request.prompt_index]
            for request, result in zip(requests, results)
            for _ in scored_samples(result.samples)
        ]
        return self.plan.rows_of(sources)

    def _completion(self, sample):
        """A sample's completion as reward functions get it: an agent's conversation after the prompt
        (its messages), a conversational run's one assistant message, or the text."""
        if sample.messages is not None:
            return sample.messages
        return sample.completion if self.conversations is None else [{"role": "assistant", "content": sample.completion}]

    def timed_out(self, group_ids: list[int], rows: int) -> dict:
        """The scores of a task cancelled past its deadline: like a reward function that raises, an
        error naming the functions, unless `error_score` is set: then each of its samples scores that
        and is counted under "reward_errors". Each function's own column is NaN (not scored): which
        of them did not return is not known."""
        from orchestrator.contracts.reward_models import reward_name
        from orchestrator.rewards.functions import RewardError

        if self.error_score is None:
            names = repr(self.reward_funcs[0]) if len(self.reward_funcs) == 1 else f"one of {self.reward_funcs}"
            groups = ", ".join(map(str, group_ids[:8])) + (", ..." if len(group_ids) > 8 else "")
            raise RewardError(
                f"reward function {names} did not return within reward_timeout_s={self.timeout_s:g} on {rows} samples "
                f"(group_id {groups}); the reward task was cancelled (raise reward_timeout_s if it is only slow, or set "
                "reward_error_score to score such samples)"
            )
        return {
            **{f"rewards/{reward_name(spec)}": [math.nan] * rows for spec in self.reward_funcs},
            "reward": [self.error_score] * rows,
            "reward_errors": rows,
        }


def _class_name(request: GroupRequest) -> str | None:
    """The class of the environment a group's samples ran in (None: no environment)."""
    environments = request.environment.environments if request.environment is not None else {}
    environment = environments.get(request.environment_name)
    return None if environment is None else environment.class_name


def scored_samples(samples: list[Sample]) -> list[Sample]:
    """The samples a reward task scores: all of them, but of a split agent session (its segments, each a
    sample: workers/agents/trajectory.py) only the last segment, where its conversation ended. Earlier
    segments take its scores (`score_rows`): scoring a conversation cut short would stop a run whose
    reward function finds no answer in it, and call judges for scores nobody uses."""
    return [sample for sample, after in zip(samples, [*samples[1:], None]) if after is None or after.segment == 0]


def score_rows(samples: list[Sample]) -> list[int]:
    """For each sample, the position of its scores among `scored_samples(samples)`'."""
    return list(itertools.accumulate((sample.segment == 0 for sample in samples), initial=-1))[1:]


class _Task(NamedTuple):
    groups: list[tuple[int, list[int]]]  # (group id, score_rows of its samples), in the task's row order
    deadline: float  # time.monotonic() past which the task is cancelled


class StepRewards:
    """One step's reward tasks: `add` each group as it comes back, `close` once generation is over,
    then `scores()` waits for the tasks and returns the step's scores in request order.

    A task's deadline is counted from its submission, which is when it can start: the tasks ask for
    no CPU, so Ray queues none of them behind the others, and the groups that wait for a free task
    slot (`max_tasks`) wait on the driver, not in a submitted task. The start of a Ray worker process
    and the import of the reward files count against it. A batch generated ahead (`max_staleness`)
    keeps its tasks' deadlines: by the time its scores are read, a task that hangs is cancelled at
    once."""

    def __init__(
        self,
        submit: Callable[[list[GroupRequest], list[GroupResult]], object],
        requests: list[GroupRequest],
        max_tasks: int = 2,
        min_samples: int = 1,
        timeout_s: float | None = None,
        timed_out: Callable[[list[int], int], dict] | None = None,
    ):
        """`submit(requests, results)` starts one reward task over those groups (rows in that
        order, each group's `scored_samples` together) and returns its ObjectRef. A task not done `timeout_s`
        after its submission is cancelled and `timed_out(group ids, rows)` gives its scores or
        raises; None: no deadline."""
        self.requests = requests
        self._by_id = {request.group_id: request for request in requests}
        self._submit = submit
        self.max_tasks = max_tasks
        self.min_samples = min_samples
        self.timeout_s = timeout_s
        self._timed_out = timed_out
        self._waiting: list[tuple[GroupRequest, GroupResult]] = []
        self._waiting_samples = 0
        self._running = 0  # tasks not finished yet (each lowers it when done, from Ray's thread)
        self._lock = threading.Lock()
        self._tasks: dict[object, _Task] = {}  # by ObjectRef, in submission order

    def add(self, result: GroupResult) -> None:
        """A group came back: score it with those waiting once enough wait and a task slot is free."""
        self._waiting.append((self._by_id[result.group_id], result))
        self._waiting_samples += len(result.samples)
        if self._waiting_samples >= self.min_samples and self._running < self.max_tasks:
            self.close()

    def close(self) -> StepRewards:
        """Start a task for every group still waiting (call once generation is over)."""
        if self._waiting:
            requests, results = zip(*self._waiting)
            ref = self._submit(list(requests), list(results))
            deadline = time.monotonic() + self.timeout_s if self.timeout_s is not None else math.inf
            self._tasks[ref] = _Task([(result.group_id, score_rows(result.samples)) for result in results], deadline)
            with self._lock:
                self._running += 1
            ref.future().add_done_callback(self._task_done)
            self._waiting, self._waiting_samples = [], 0
        return self

    def _task_done(self, _future) -> None:
        with self._lock:
            self._running -= 1

    @property
    def tasks(self) -> int:
        return len(self._tasks)

    def per_group(self, get: Callable[[object], dict]) -> dict[int, dict]:
        """Each group's scores (`get` fetches a task's result): lists cut to the group's rows, a split
        session's scores repeated over its segments; a task's `reward_errors` count goes to its first group so
        that sums stay right."""
        scores = {}
        for ref, (groups, _) in self._tasks.items():
            task = get(ref)
            row = 0
            for position, (group_id, rows) in enumerate(groups):
                scores[group_id] = {
                    key: (value if position == 0 else 0) if key == "reward_errors" else [value[row + i] for i in rows]
                    for key, value in task.items()
                }
                row += rows[-1] + 1
        return scores

    def scores(self) -> dict:
        """Wait for the tasks (mostly done while generating), none past its deadline. When one fails,
        the others still running are cancelled: the run stops, and nothing else would end them."""
        try:
            per_group = self.per_group(self._result)
        except BaseException:
            self._cancel_unfinished()
            raise
        return merge_scores([per_group[request.group_id] for request in self.requests])

    def _result(self, ref) -> dict:
        """A task's scores, waited for until its deadline. Past it the task is cancelled with force (a
        function stuck in a sleep or in C code never sees a gentler cancel) so that it does not hold
        a worker process, and `timed_out` gives its scores."""
        import ray

        task = self._tasks[ref]
        if task.deadline < math.inf:
            ready, _ = ray.wait([ref], timeout=max(0.0, task.deadline - time.monotonic()))
            if not ready:
                ray.cancel(ref, force=True)
                return self._timed_out([group_id for group_id, _ in task.groups], sum(rows[-1] + 1 for _, rows in task.groups))
        return unwrap(ref)

    def _cancel_unfinished(self) -> None:
        import ray

        refs = list(self._tasks)
        _, unfinished = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in unfinished:
            ray.cancel(ref, force=True)


def merge_scores(per_group: list[dict]) -> dict:
    """One step's scores from its groups' (in request order): lists concatenated, counts summed."""
    merged = {}
    for scores in per_group:
        for key, value in scores.items():
            if key == "reward_errors":
                merged[key] = merged.get(key, 0) + value
            else:  # extend in place: concatenating copies the whole list for every group
                merged.setdefault(key, []).extend(value)
    return merged


def unwrap(ref):
    """ray.get, re-raising a user-facing error from a task (a `UserError`, or a `RunError` such as a lost
    reward model) as itself (no Ray traceback)."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, (UserError, RunError)):
            raise error.cause from None
        raise


def _on_driver_node(num_cpus: float) -> dict:
    """Where a reward task runs. One that reserves no CPU runs on the driver's node, where its results
    go (elsewhere only if that node cannot run it): left to Ray, it may land on any node, a rollout node
    the pool no longer uses included, which then never counts as idle and Ray's autoscaler never removes.
    One that reserves CPUs goes wherever Ray finds them free."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if num_cpus:
        return {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)}
