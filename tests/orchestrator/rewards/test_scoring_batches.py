"""Reward tasks at scale: groups that come back while the tasks run share the next task, and
every group still gets exactly its own scores back."""

import time

from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.sampling import SamplingConfig


def _group(group_id: int):
    request = GroupRequest(group_id, group_id, f"p{group_id}", [1], 2, SamplingConfig())
    samples = [Sample(i, f"g{group_id}s{i}", [1], [0.0], "stop", None, None) for i in range(2)]
    return request, GroupResult(group_id, 0, 0, samples)


def _slow_score(completions: list[str]) -> dict:
    time.sleep(2.0)  # still running while the next groups come back
    return {"reward": [float(len(c)) for c in completions], "text": completions, "reward_errors": 1}


def test_groups_back_while_tasks_run_share_the_next_task(ray_session):
    import ray

    from orchestrator.rewards.scoring import StepRewards

    task = ray.remote(_slow_score).options(num_cpus=0)
    started = []

    def submit(requests, results):
        started.append([request.group_id for request in requests])
        return task.remote([sample.completion for result in results for sample in result.samples])

    requests, results = zip(*map(_group, range(7)))
    batches = StepRewards(submit, list(requests), max_tasks=2)
    for result in results:
        batches.add(result)
    batches.close()
    assert started == [[0], [1], [2, 3, 4, 5, 6]]  # two tasks busy: the other five wait and go together

    scores = batches.per_group(ray.get)
    assert [scores[g]["text"] for g in range(7)] == [[f"g{g}s0", f"g{g}s1"] for g in range(7)]
    assert sum(scores[g]["reward_errors"] for g in range(7)) == 3  # one per task, counted once


def test_a_task_starts_once_enough_samples_wait_and_the_rest_at_the_end(ray_session):
    import ray

    from orchestrator.rewards.scoring import StepRewards

    task = ray.remote(lambda completions: {"reward": [0.0] * len(completions), "reward_errors": 0}).options(num_cpus=0)
    started = []

    def submit(requests, results):
        started.append([request.group_id for request in requests])
        return task.remote([sample.completion for result in results for sample in result.samples])

    requests, results = zip(*map(_group, range(7)))
    batches = StepRewards(submit, list(requests), min_samples=5)  # groups of 2 samples: a task per 3 groups
    for result in results:
        batches.add(result)
    assert started == [[0, 1, 2], [3, 4, 5]]  # group 6 waits for more
    batches.close()
    assert started[-1] == [6]
    assert sorted(batches.per_group(ray.get)) == list(range(7))
