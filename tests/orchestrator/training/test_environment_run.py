"""TRL's environment_factory end to end: `train` on the shipped lookup environment (real Ray, vLLM, TRL),
the tiny tool-calling chat model calling the environment's tools through Qwen2.5's chat template."""

import json

import pyarrow.parquet as pq
import pytest
import yaml

from orchestrator.builtin.lookup_task import CODES
from tests.orchestrator.training.short_run import metrics, train_config
from tests.orchestrator.training.test_tool_run import SHIPPED as TEXT_TAG_CONFIG

pytestmark = pytest.mark.engines

SHIPPED = TEXT_TAG_CONFIG.parents[1] / "environments" / "lookup.yaml"
STEPS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("environment")
    config = yaml.safe_load(SHIPPED.read_text())
    config.update(prompts_per_step=4, num_generations=4, max_steps=STEPS, output_dir=str(folder / "run"), plot_steps=100)
    return train_config(folder, config)


@pytest.fixture(scope="module")
def rows(run):
    return pq.read_table(run / "rollouts").to_pylist()


def test_the_run_calls_the_environments_tools_and_trains_on_the_models_tokens_only(run):
    steps = metrics(run)
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    assert all(m["tools/calls"] > 0 for m in steps)
    assert max(m["sampling/sampling_logp_difference/mean"] for m in steps) < 0.01  # over the model's tokens only


def test_each_tool_result_is_context_and_reads_as_the_template_renders_it(run, rows):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run / "checkpoints" / f"step-{STEPS:06d}")
    checked = 0
    for row in rows:
        masked = [i for i, m in zip(row["completion_ids"], row["tool_mask"]) if m == 0]
        if not row["tool_calls"]:
            assert not masked
            continue
        text = tokenizer.decode(masked)
        for call in row["tool_calls"]:
            assert f"<tool_response>\n{call['result']}\n</tool_response>" in text
            checked += 1
    assert checked >= len(rows) // 2


def test_the_environment_owns_the_reward_under_its_class_name(rows):
    topics = {f"What is the code of {t}?": t for t in CODES} | {f"Give the code for {t}.": t for t in CODES}
    for row in rows:
        topic = next(topic for question, topic in topics.items() if question in row["prompt"])
        searched = [json.loads(call["call"])["topic"].strip() for call in row["tool_calls"] if call["name"] == "lookup"]
        answers = [json.loads(call["call"])["code"].strip() for call in row["tool_calls"] if call["name"] == "answer"]
        expected = 0.5 * (topic in searched) + 0.5 * (bool(answers) and answers[-1] == CODES[topic])
        assert row["rewards/LookupEnvironment"] == expected == row["reward"]
