"""Reward functions get the prompt file's other columns by name, as with TRL (e.g. an answer)."""

import json
import types

import pyarrow as pa

from orchestrator.config.train import TrainConfig
from orchestrator.training.loop import GRPORun, _merge_scores, _unwrap
from orchestrator.training.preflight import preflight
from orchestrator.training.run_dir import RunDir


def test_dataset_columns_reach_the_reward_function(tmp_path, ray_session):
    prompts = tmp_path / "math.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Q: {a}+{a} ? A:", "answer": str(2 * a), "group_id": "x"}) + "\n" for a in (1, 2)))
    reward = tmp_path / "exact.py"
    reward.write_text("def exact(prompts, completions, answer, **kw):\n    return [float(c.strip() == a) for c, a in zip(completions, answer)]\n")
    config = TrainConfig(prompts=str(prompts), reward_funcs=[f"{reward}:exact"], max_completion_length=8, num_generations=2)
    checked = preflight(config)
    assert checked.columns == [{"answer": "2", "group_id": "x"}, {"answer": "4", "group_id": "x"}]

    parts = types.SimpleNamespace(pool=types.SimpleNamespace(on_engine_ready=None))
    run = GRPORun(config, checked.prompts, RunDir(tmp_path / "run"), parts, columns=checked.columns)
    table = pa.table({
        "prompt_index": [1, 1, 0, 0], "group_id": [0, 0, 1, 1], "sample_index": [0, 1, 0, 1],
        "prompt": [checked.prompts[i] for i in (1, 1, 0, 0)], "completion": [" 4", " 5", " 2", " 2"],
        "completion_ids": [[1], [1], [1], [1]], "finish_reason": ["stop"] * 4, "stop_reason": [None] * 4,
    })
    scores = _unwrap(run._score(table))
    assert scores["reward"] == [1.0, 0.0, 1.0, 1.0]  # the column named group_id does not shadow ours


def test_groups_scored_separately_merge_in_request_order():
    first = {"reward": [1.0, 0.0], "rewards/a": [1.0, 0.0], "reward_errors": 1}
    second = {"reward": [0.5, 0.5], "rewards/a": [0.5, 0.5], "reward_errors": 0}
    assert _merge_scores([first, second]) == {"reward": [1.0, 0.0, 0.5, 0.5], "rewards/a": [1.0, 0.0, 0.5, 0.5], "reward_errors": 1}


def test_conversational_prompts_reach_reward_functions_in_trls_shapes(tmp_path, ray_session):
    chat = [{"role": "user", "content": "What is 1 + 1?"}]
    reward = tmp_path / "shapes.py"
    reward.write_text(
        "def shapes(prompts, completions, **kw):\n"
        "    assert prompts == [[{'role': 'user', 'content': 'What is 1 + 1?'}]] * 2, prompts\n"
        "    assert completions == [[{'role': 'assistant', 'content': c}] for c in ('2', '3')], completions\n"
        "    return [1.0, 0.0]\n"
    )
    config = TrainConfig(reward_funcs=[f"{reward}:shapes"], num_generations=2)
    parts = types.SimpleNamespace(pool=types.SimpleNamespace(on_engine_ready=None))
    rendered = "<|im_start|>user\nWhat is 1 + 1?<|im_end|>\n<|im_start|>assistant\n"
    run = GRPORun(config, [rendered], RunDir(tmp_path / "run"), parts, columns=[{}], conversations=[chat])
    table = pa.table({
        "prompt_index": [0, 0], "group_id": [0, 0], "sample_index": [0, 1], "prompt": [rendered] * 2,
        "completion": ["2", "3"], "completion_ids": [[1], [1]], "finish_reason": ["stop"] * 2, "stop_reason": [None] * 2,
    })
    assert _unwrap(run._score(table))["reward"] == [1.0, 0.0]
