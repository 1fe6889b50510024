"""An agent run whose engine's vLLM process dies mid-step (the first session SIGKILLs it, then retries its
call as a careful agent would): the pool replaces the engine and the step's groups run again there, with
fresh sessions. No session is scored as the agent's failure, nothing is lost or duplicated, and the run counts
the engine it replaced.

Marked slow (about 1.5 minutes on 2 cores; the replacement engine's start is most of it): `make test
PYTEST_ARGS="-m slow"` runs it. tests/workers/rollout/test_while_alive.py covers the engine's side fast."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from orchestrator.builtin import lookup_task
from tests.orchestrator.training.short_run import metrics, train_config

pytestmark = [pytest.mark.engines, pytest.mark.slow]

HERE = Path(__file__).parent
AGENTS = HERE / "agents.py"
SHIPPED = HERE.parents[2] / "configs" / "agents" / "lookup.yaml"
STEPS, PROMPTS, GENERATIONS = 3, 4, 4


def test_an_agent_runs_groups_are_sent_elsewhere_when_their_engine_dies(tmp_path):
    record = tmp_path / "record"
    record.mkdir()
    topics = list(lookup_task.CODES)[:PROMPTS]
    rows = [{"prompt": lookup_task.prompt_for(t), "answer": lookup_task.CODES[t], "record_dir": str(record)} for t in topics]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = yaml.safe_load(SHIPPED.read_text())
    config.update(
        prompts=str(tmp_path / "prompts.jsonl"),
        chat_template=str(SHIPPED.parent / "lookup.jinja"),
        prompts_per_step=PROMPTS,
        num_generations=GENERATIONS,
        max_steps=STEPS,
        reward_error_score=None,  # a session scored as failed would stop the run
        output_dir=str(tmp_path / "run"),
        agent={"fn": f"{AGENTS}:kills_its_engine_once", "max_calls": 3},
    )
    run = train_config(tmp_path, config)
    assert (record / "killed").is_file()

    steps = metrics(run)
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    assert steps[-1]["engine_restarts"] == 1
    assert all(m["agent/errors"] == 0 for m in steps)
    table = pq.read_table(run / "rollouts")
    assert table.num_rows == STEPS * PROMPTS * GENERATIONS
    keys = list(zip(*(table.column(c).to_pylist() for c in ("step", "group_id", "sample_index"))))
    assert len(set(keys)) == len(keys)
    assert 1 in table.column("engine_id").to_pylist()  # the replacement served
    assert all(error is None for error in table.column("agent_error").to_pylist())
