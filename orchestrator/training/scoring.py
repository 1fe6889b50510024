"""A step's rewards: groups handed to reward tasks as they come back, scores merged in request order.

    scorer = StepScorer(reward_funcs, reward_weights, error_score, columns)
    scoring = scorer.begin(requests)          # once per step
    pool.generate(requests, on_result=scoring.add)
    scores = scoring.close().scores()         # {"reward": [...], "rewards/<fn>": [...], "reward_errors": n}

Each reward task gets TRL's arguments for its groups (prompts, completions, completion_ids), our
per-sample fields (group_id, sample_index, finish_reason, stop_reason), and the prompt file's other
columns by name, built straight from the results: no table per task. `train` and `simulate` both
score through this class, so the simulation measures exactly what a training step does.
"""

from __future__ import annotations

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.training.reward_batches import RewardBatches

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
}


class StepScorer:
    def __init__(
        self,
        reward_funcs: list[str],
        reward_weights: list[float] | None,
        error_score: float | None,
        columns: list[dict] | None = None,
        batch_samples: int = 1,
        conversations: list[list[dict]] | None = None,
    ):
        """`columns[i]`: prompt i's other dataset columns (reward functions get them as kwargs);
        `batch_samples`: samples per reward task while generation runs (reward_batches.py);
        `conversations[i]`: prompt i's messages when the prompts are conversations: reward functions
        then get TRL's conversational shapes (the message lists, and each completion as
        `[{"role": "assistant", "content": ...}]`) instead of the rendered texts."""
        self.reward_funcs = reward_funcs
        self.conversations = conversations
        self.batch_samples = batch_samples
        self.reward_weights = reward_weights
        self.error_score = error_score
        self.columns = columns or []
        self.dataset_keys = [key for key in (self.columns[0] if self.columns else {}) if key not in RESERVED_REWARD_KWARGS]
        self._task = None

    def begin(self, requests: list[GroupRequest]) -> StepScoring:
        return StepScoring(self, requests)

    def submit(self, requests: list[GroupRequest], results: list[GroupResult]):
        """Start one reward task over these groups (rows: each group's samples in order); its ObjectRef."""
        import ray

        from orchestrator.training.rewards import score

        if self._task is None:
            self._task = ray.remote(score).options(num_cpus=0, max_retries=0)
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
                *self.dataset_keys,
            )
        }
        for request, result in zip(requests, results):
            row = self.columns[request.prompt_index] if self.dataset_keys else None
            prompt = request.prompt if self.conversations is None else self.conversations[request.prompt_index]
            for sample in result.samples:
                fields["prompts"].append(prompt)
                fields["completions"].append(
                    sample.completion if self.conversations is None else [{"role": "assistant", "content": sample.completion}]
                )
                fields["completion_ids"].append(sample.completion_ids)
                fields["group_id"].append(request.group_id)
                fields["sample_index"].append(sample.sample_index)
                fields["finish_reason"].append(sample.finish_reason)
                fields["stop_reason"].append(sample.stop_reason)
                for key in self.dataset_keys:
                    fields[key].append(row.get(key))
        return self._task.remote(self.reward_funcs, self.reward_weights, error_score=self.error_score, **fields)


class StepScoring:
    """One step's reward tasks: `add` each group as it comes back, `close` once generation is over,
    then `scores()` waits for the tasks and returns the step's scores in request order."""

    def __init__(self, scorer: StepScorer, requests: list[GroupRequest]):
        self.requests = requests
        self._by_id = {request.group_id: request for request in requests}
        self._batches = RewardBatches(scorer.submit, min_samples=scorer.batch_samples)

    def add(self, result: GroupResult) -> None:
        self._batches.add(self._by_id[result.group_id], result)

    def close(self) -> StepScoring:
        self._batches.close()
        return self

    @property
    def tasks(self) -> int:
        return self._batches.tasks

    def scores(self) -> dict:
        per_group = self._batches.per_group(unwrap)  # mostly done while generating
        return merge_scores([per_group[request.group_id] for request in self.requests])


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
    """ray.get, re-raising a user-facing error from a task as itself (no Ray traceback)."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, UserError):
            raise error.cause from None
        raise
