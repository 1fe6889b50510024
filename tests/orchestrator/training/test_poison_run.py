"""A prompt whose agent kills its engine every time it runs (real Ray, vLLM, TRL; slow: two engine
restarts). After rollout.max_group_deaths=2 deaths its group fails by name and scores reward_error_score,
the run trains on, and in the next epoch the prompt fails at once: the run spends two engines, not
rollout.max_restarts. The default suite covers the same rules on fake engines (rollout/test_dispatch.py,
rollout/test_poison.py)."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from orchestrator.builtin import lookup_task
from tests.orchestrator.training.short_run import metrics, train_config

pytestmark = [pytest.mark.engines, pytest.mark.slow]

HERE = Path(__file__).parent
SHIPPED = HERE.parents[2] / "configs" / "agents" / "lookup.yaml"
STEPS, GENERATIONS = 2, 2
PROMPTS = [("apple", ""), ("river", ""), ("tiger", ""), ("piano", "kill")]


def test_a_prompt_whose_agent_kills_its_engine_fails_by_name_and_spends_two_engines(tmp_path):
    record = tmp_path / "record"
    record.mkdir()
    rows = [
        {"prompt": lookup_task.prompt_for(topic), "answer": lookup_task.CODES[topic], "fault": fault, "record_dir": str(record)}
        for topic, fault in PROMPTS
    ]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = yaml.safe_load(SHIPPED.read_text())
    config.update(
        prompts=str(tmp_path / "prompts.jsonl"),
        chat_template=str(SHIPPED.parent / "lookup.jinja"),
        prompts_per_step=len(PROMPTS),  # one epoch a step: the poison prompt comes back in step 2
        num_generations=GENERATIONS,
        max_steps=STEPS,
        reward_error_score=-1.0,
        output_dir=str(tmp_path / "run"),
        agent={"fn": f"{HERE / 'agents.py'}:recording_lookup", "max_calls": 3, "session_timeout_s": 30},
    )
    config["rollout"] = {**config["rollout"], "max_restarts": 8}
    out = train_config(tmp_path, config)
    steps = metrics(out)
    assert len(steps) == STEPS and steps[-1]["engine_restarts"] == 2
    table = [row for path in sorted((out / "rollouts").glob("step-*.parquet")) for row in pq.read_table(path).to_pylist()]
    poison = [row for row in table if row["prompt"] == lookup_task.prompt_for("piano")]
    assert len(poison) == STEPS * GENERATIONS and all(row["reward"] == -1.0 for row in poison)
    for row in poison:
        assert (
            f"group {row['group_id']} (prompt 3, agent {HERE / 'agents.py'}:recording_lookup) failed: its prompt's "
            in row["agent_error"]
        )
        assert "were on 2 engines that died (rollout.max_group_deaths=2); last error: " in row["agent_error"]
    assert not [row for row in table if row not in poison and "failed: its prompt's" in (row["agent_error"] or "")]
