"""A step's reward tasks: reward functions get the prompt file's other columns by name, as with TRL
(e.g. an answer); groups scored in separate tasks come back in request order."""

import json

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rewards.scoring import RewardScorer, merge_scores
from orchestrator.training.preflight import preflight


def _group(group_id: int, prompt_index: int, prompt: str, completions: list[str]):
    request = GroupRequest(group_id, prompt_index, prompt, [1], len(completions), SamplingConfig())
    samples = [Sample(i, text, [1], [0.0], "stop", None, None) for i, text in enumerate(completions)]
    return request, GroupResult(group_id, 0, 0, samples)


def test_dataset_columns_reach_the_reward_function(tmp_path, ray_session):
    prompts = tmp_path / "math.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"Q: {a}+{a} ? A:", "answer": str(2 * a), "group_id": "x"}) + "\n" for a in (1, 2))
    )
    reward = tmp_path / "exact.py"
    reward.write_text(
        "def exact(prompts, completions, answer, **kw):\n    return [float(c.strip() == a) for c, a in zip(completions, answer)]\n"
    )
    config = TrainConfig(prompts=str(prompts), reward_funcs=[f"{reward}:exact"], max_completion_length=8, num_generations=2)
    checked = preflight(config)
    assert checked.data.columns == [{"answer": "2", "group_id": "x"}, {"answer": "4", "group_id": "x"}]

    scorer = RewardScorer(config.reward_funcs, None, None, checked.data.columns)
    groups = [_group(0, 1, checked.data.prompts[1], [" 4", " 5"]), _group(1, 0, checked.data.prompts[0], [" 2", " 2"])]
    scoring = scorer.begin([request for request, _ in groups])
    for _, result in reversed(groups):  # results come back in any order
        scoring.add(result)
    scores = scoring.close().scores()
    assert scores["reward"] == [1.0, 0.0, 1.0, 1.0]  # request order; the column named group_id does not shadow ours


def test_groups_scored_separately_merge_in_request_order():
    first = {"reward": [1.0, 0.0], "rewards/a": [1.0, 0.0], "reward_errors": 1}
    second = {"reward": [0.5, 0.5], "rewards/a": [0.5, 0.5], "reward_errors": 0}
    assert merge_scores([first, second]) == {
        "reward": [1.0, 0.0, 0.5, 0.5],
        "rewards/a": [1.0, 0.0, 0.5, 0.5],
        "reward_errors": 1,
    }


def test_conversational_prompts_reach_reward_functions_in_trls_shapes(tmp_path, ray_session):
    chat = [{"role": "user", "content": "What is 1 + 1?"}]
    reward = tmp_path / "shapes.py"
    reward.write_text(
        "def shapes(prompts, completions, **kw):\n"
        "    assert prompts == [[{'role': 'user', 'content': 'What is 1 + 1?'}]] * 2, prompts\n"
        "    assert completions == [[{'role': 'assistant', 'content': c}] for c in ('2', '3')], completions\n"
        "    return [1.0, 0.0]\n"
    )
    rendered = "<|im_start|>user\nWhat is 1 + 1?<|im_end|>\n<|im_start|>assistant\n"
    request, result = _group(0, 0, rendered, ["2", "3"])
    scoring = RewardScorer([f"{reward}:shapes"], None, None, [{}], conversations=[chat]).begin([request])
    scoring.add(result)
    assert scoring.close().scores()["reward"] == [1.0, 0.0]


def test_a_reward_task_that_reserves_no_cpu_runs_on_the_drivers_node(ray_session):
    """Left to Ray, a 0-CPU task may land on an idle rollout node, which then never counts as idle."""
    import ray

    from orchestrator.rewards.scoring import _on_driver_node

    (strategy,) = _on_driver_node(0.0).values()
    assert strategy.node_id == ray.get_runtime_context().get_node_id() and strategy.soft
    assert _on_driver_node(1.0) == {}  # reserving CPUs: wherever Ray finds them free


def test_a_split_sessions_last_segment_alone_is_scored_and_its_scores_cover_its_segments(tmp_path, ray_session):
    """agent.on_prefix_mismatch: split: sample 1's session is two segments. Its first segment has no answer yet
    (the function returns None: were it scored, the run would stop); the function sees the last one only, and
    both rows get its score."""
    reward = tmp_path / "answered.py"
    reward.write_text(
        "def answered(completions, sample_index, **kw):\n"
        "    assert 'draft' not in completions, completions\n"
        "    return [None if c == 'draft' else float(c == 'right') for c in completions]\n"
    )
    request = GroupRequest(0, 0, "Q", [1], 3, SamplingConfig())
    texts = [(0, 0, "wrong"), (1, 0, "draft"), (1, 1, "right"), (2, 0, "wrong")]
    samples = [Sample(i, text, [1], [0.0], "stop", None, None, segment=segment) for i, segment, text in texts]
    scoring = RewardScorer([f"{reward}:answered"], None, None).begin([request])
    scoring.add(GroupResult(0, 0, 0, samples))
    scores = scoring.close().scores()
    [own] = [values for name, values in scores.items() if name.startswith("rewards/")]
    assert scores["reward"] == own == [0.0, 1.0, 1.0, 0.0]
    assert scores["reward_errors"] == 0


def test_a_reward_task_whose_worker_process_dies_runs_once_more(tmp_path, ray_session):
    first = tmp_path / "killed-once"
    reward = tmp_path / "dies.py"
    reward.write_text(
        "import os, signal\n"
        "def dies(prompts, completions, **kw):\n"
        f"    if not os.path.exists({str(first)!r}):\n"
        f"        open({str(first)!r}, 'w').close()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)  # the worker process dies, as under the OOM killer\n"
        "    return [float(len(c)) for c in completions]\n"
    )
    scorer = RewardScorer([f"{reward}:dies"], None, None, None)
    request, result = _group(0, 0, "Q:", [" a", " bb"])
    scoring = scorer.begin([request])
    scoring.add(result)
    assert scoring.close().scores()["reward"] == [2.0, 3.0]
    assert first.exists()  # the first attempt ran, and died


def test_each_source_is_scored_by_its_own_functions_in_the_reward_task(tmp_path, ray_session):
    from orchestrator.contracts.reward_plan import RewardPlan

    reward = tmp_path / "two.py"
    reward.write_text(
        "def length(prompts, completions, **kw):\n    return [float(len(c)) for c in completions]\n"
        "def exact(prompts, completions, answer, **kw):\n    return [float(c.strip() == a) for c, a in zip(completions, answer)]\n"
    )
    length, exact = f"{reward}:length", f"{reward}:exact"
    plan = RewardPlan.of([length], None, [("math", [exact], None), ("chat", None, None)])
    columns = [{"answer": "4"}, {"answer": None}]
    scorer = RewardScorer(list(plan.specs), list(plan.weights), None, columns, plan=plan, row_sources=["math", "chat"])
    groups = [_group(0, 1, "Hi", [" a", " bb"]), _group(1, 0, "2+2=", [" 4", " 5"])]
    scoring = scorer.begin([request for request, _ in groups])
    for _, result in groups:
        scoring.add(result)
    scores = scoring.close().scores()
    assert scores["reward"] == [2.0, 3.0, 1.0, 0.0]  # chat's rows by length, math's by the exact answer
    assert scores[f"rewards/{exact}"][2:] == [1.0, 0.0] and scores[f"rewards/{length}"][:2] == [2.0, 3.0]
