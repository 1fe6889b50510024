"""A reward function that hangs: its task is cancelled at `reward_timeout_s` and the step either stops
with an error naming the function, or, with `reward_error_score`, scores that task's samples so."""

import math
import time
from pathlib import Path

import pytest

from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rewards.functions import RewardError
from orchestrator.rewards.scoring import RewardScorer

TIMEOUT_S = 2.0
SLACK_S = 10.0  # a busy machine's scheduling; far below the hour the function would sleep


def _group(group_id: int, completions: list[str]):
    request = GroupRequest(group_id, group_id, f"p{group_id}", [1], len(completions), SamplingConfig())
    samples = [Sample(i, text, [1], [0.0], "stop", None, None) for i, text in enumerate(completions)]
    return request, GroupResult(group_id, 0, 0, samples)


def _hanging_reward(tmp_path: Path) -> str:
    """A reward that sleeps for an hour on a completion "hang" and writes its process id first."""
    path = tmp_path / "stuck.py"
    path.write_text(
        "import os, time\n"
        "def stuck(prompts, completions, **kw):\n"
        "    if 'hang' in completions:\n"
        f"        open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n"
        "        time.sleep(3600)\n"
        "    return [float(len(c)) for c in completions]\n"
    )
    return f"{path}:stuck"


def _started(tmp_path: Path, within_s: float = 60.0) -> int:
    """The process id the hanging reward wrote: it is in its sleep now."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        text = (tmp_path / "pid").read_text() if (tmp_path / "pid").exists() else ""
        if text:
            return int(text)
        time.sleep(0.1)
    raise AssertionError(f"the reward task did not start within {within_s:g} s")


def _gone(pid: int, within_s: float = 15.0) -> bool:
    """Whether the process exits (or is left a zombie) within `within_s`."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False


def _scoring(spec: str, error_score: float | None, groups):
    """The groups' reward tasks, started as a step starts them (several groups per task here)."""
    requests, results = zip(*groups)
    scorer = RewardScorer([spec], None, error_score, [{}] * len(groups), batch_samples=100, timeout_s=TIMEOUT_S)
    scoring = scorer.begin(list(requests))
    for result in results:
        scoring.add(result)
    return scoring.close()


def test_a_hanging_reward_stops_the_step_naming_it_and_the_deadline(tmp_path, ray_session):
    scoring = _scoring(_hanging_reward(tmp_path), None, [_group(0, ["hang", "x"])])
    start = time.monotonic()
    pid = _started(tmp_path)
    with pytest.raises(
        RewardError, match=r"reward function '.*stuck.py:stuck' did not return within reward_timeout_s=2 on 2 samples"
    ):
        scoring.scores()
    assert time.monotonic() - start < TIMEOUT_S + SLACK_S
    assert _gone(pid), "the stuck reward task still holds its worker process"


def test_with_an_error_score_the_hanging_tasks_samples_score_it_and_are_counted(tmp_path, ray_session):
    spec = _hanging_reward(tmp_path)
    scoring = _scoring(spec, -1.0, [_group(0, ["hang", "x"]), _group(1, ["a", "bb"])])  # one task
    start = time.monotonic()
    scores = scoring.scores()
    assert time.monotonic() - start < TIMEOUT_S + SLACK_S
    assert scores["reward"] == [-1.0] * 4
    assert scores["reward_errors"] == 4
    assert all(math.isnan(value) for value in scores[f"rewards/{spec}"])  # not scored: which function hung is unknown


def test_only_the_late_task_is_cut_and_its_deadline_counts_from_its_submission(ray_session):
    import ray

    from orchestrator.rewards.scoring import StepRewards

    quick = ray.remote(lambda rows: {"reward": [1.0] * rows, "reward_errors": 0}).options(num_cpus=0)
    stuck = ray.remote(lambda rows: time.sleep(3600)).options(num_cpus=0)

    def submit(requests, results):
        rows = sum(len(result.samples) for result in results)
        if requests[0].group_id == 1:
            return stuck.remote(rows)
        ref = quick.remote(rows)
        ray.get(ref)  # done before its deadline, however busy the machine
        return ref

    cut = []

    def timed_out(group_ids: list[int], rows: int) -> dict:
        cut.append(group_ids)
        return {"reward": [-1.0] * rows, "reward_errors": rows}

    requests, results = zip(_group(0, ["a", "b"]), _group(1, ["c", "d"]), _group(2, ["e", "f"]))
    step = StepRewards(submit, list(requests), max_tasks=3, timeout_s=TIMEOUT_S, timed_out=timed_out)  # a task per group
    for result in results:
        step.add(result)
    time.sleep(TIMEOUT_S)  # read after the deadlines, as a batch generated ahead is
    start = time.monotonic()
    assert step.close().scores() == {"reward": [1.0, 1.0, -1.0, -1.0, 1.0, 1.0], "reward_errors": 2}
    assert time.monotonic() - start < TIMEOUT_S  # no second deadline's wait
    assert cut == [[1]]
