"""Evaluation on held-out prompts, with a stand-in for the pool: when it runs, what it records, and
that it leaves the training stream alone."""

import pyarrow.parquet as pq

from orchestrator.builtin import arithmetic_task
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.groups import GroupResult, Sample
from orchestrator.data.stream import PromptStream
from orchestrator.training.evaluation import EVAL_GROUP_BASE, EvalSet, Evaluation


class FakeTokenizer:
    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) % 50 for c in text]}


class Answering:
    """A pool stand-in: sample i of every group replies replies[i]; it records what it was sent."""

    def __init__(self, replies):
        self.replies, self.sent = replies, []

    def generate(self, requests, on_result=None):
        self.sent.append(requests)
        results = [
            GroupResult(
                r.group_id,
                0,
                3,
                [
                    Sample(i, self.replies[i], [5] * (i + 1), [-0.1] * (i + 1), "stop", None, None)
                    for i in range(r.num_generations)
                ],
            )
            for r in requests
        ]
        for result in results:
            on_result(result)
        return results


def evaluation(**overrides):
    records = arithmetic_task.eval_records()[:3]
    conversations = [r["prompt"] for r in records]
    texts = [str(c) for c in conversations]
    prompt_ids = [FakeTokenizer()(text)["input_ids"] for text in texts]
    eval_set = EvalSet("builtin:arithmetic_eval", texts, [{"answer": r["answer"]} for r in records], conversations, prompt_ids)
    config = TrainConfig(
        reward_funcs=["builtin:math_answer"], eval_num_generations=2, eval_steps=5, max_steps=12, seed=3, **overrides
    )
    return Evaluation(config, eval_set), records


def test_due_every_eval_steps_and_after_the_last_step():
    ev, _ = evaluation()
    assert [step for step in range(1, 13) if ev.due(step)] == [5, 10, 12]


def test_metrics_pass_at_k_and_the_eval_parquet(tmp_path, ray_session):
    ev, records = evaluation()
    right = [f"#### {records[0]['answer']}", "#### 99"]  # sample 0 right only where the answer matches
    metrics = ev.run(Answering(right), step=5, folder=tmp_path)
    correct = [r["answer"] == records[0]["answer"] for r in records]
    assert metrics["eval/samples"] == 6 and metrics["eval/policy_version"] == 3
    assert metrics["eval/pass@1"] == sum(correct) / 6
    assert metrics["eval/pass@2"] == sum(correct) / 3
    assert metrics["eval/reward_mean"] == sum(correct) / 6
    assert metrics["eval/completion_length"] == 1.5
    table = pq.read_table(tmp_path / "step-000005.parquet")
    assert table.column("step").to_pylist() == [5] * 6 and len(table.column("reward")) == 6


def test_eval_groups_and_seeds_stay_apart_from_training_and_repeat_each_round(tmp_path, ray_session):
    ev, _ = evaluation(eval_temperature=0.5)
    stream = PromptStream(["a", "b", "c"], seed=3)
    before = stream.take(2)
    pool = Answering(["#### 1", "#### 2"])
    ev.run(pool, step=5, folder=tmp_path)
    ev.run(pool, step=10, folder=tmp_path)
    rounds = [[(r.group_id, r.sampling.seed + r.group_id) for r in requests] for requests in pool.sent]
    ids = [gid for round_ in rounds for gid, _ in round_]
    assert min(ids) >= EVAL_GROUP_BASE and len(set(ids)) == len(ids)  # fresh ids every round
    assert [seed for _, seed in rounds[0]] == [seed for _, seed in rounds[1]]  # same noise every round
    assert pool.sent[0][0].sampling.temperature == 0.5 and pool.sent[0][0].num_generations == 2
    assert stream.position == 2 and stream.take(1)[0].group_id == 2 and before[1].group_id == 1
