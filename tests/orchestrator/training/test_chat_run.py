"""`train` on the chat demo end to end (real Ray, vLLM, TRL): conversational prompts rendered with
the chat template, held-out evaluation, TensorBoard and MLflow.

The prompts are the demo's training set written as a dataset folder that `datasets.load_dataset`
reads (data/train-*.parquet), its conversations in a column named `messages` (`prompts_column`),
with one conversation repeated, so duplicate conversations must stay separate groups.
"""

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from orchestrator.builtin import arithmetic_task
from tests.orchestrator.training.short_run import metrics, train_config

pytestmark = pytest.mark.engines

STEPS, EVAL_STEPS = 10, 5  # the shipped settings otherwise: 8 prompts x 8 samples per step, eval pass@8
SHIPPED = Path(__file__).parents[3] / "configs" / "chat" / "arithmetic.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chat")
    records = arithmetic_task.records()
    records += [records[0]] * 3  # the same conversation four times
    rows = [{"messages": r["prompt"], **{k: v for k, v in r.items() if k != "prompt"}} for r in records]
    (folder / "arithmetic" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "arithmetic" / "data" / "train-00000-of-00001.parquet")
    config = yaml.safe_load(SHIPPED.read_text())
    config.update(
        prompts="arithmetic",  # relative to the config file's folder
        prompts_column="messages",
        max_steps=STEPS,
        eval_steps=EVAL_STEPS,
        report_to=["tensorboard", "mlflow"],
        output_dir=str(folder / "run"),
    )
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(folder / "hf-cache")}
    environment.pop("MLFLOW_TRACKING_URI", None)  # the run folder's own store
    # cwd: neither the config's folder nor the repository
    train_config(folder, config, env=environment, cwd=tmp_path_factory.mktemp("elsewhere"))
    return folder / "run", records, config["num_generations"]


def test_eval_is_logged_at_the_expected_steps_and_rises(run):
    out, *_ = run
    steps = metrics(out)
    evaluated = [m for m in steps if "eval/reward_mean" in m]
    assert [m["step"] for m in evaluated] == list(range(EVAL_STEPS, STEPS + 1, EVAL_STEPS))
    assert all(k in m for m in evaluated for k in ("eval/pass@1", "eval/pass@8", "eval/completion_length"))
    assert all(m["eval/samples"] == 20 * 8 for m in evaluated)  # the 20 held-out sums x eval_num_generations
    assert evaluated[-1]["eval/reward_mean"] > evaluated[0]["eval/reward_mean"]
    assert sorted(p.name for p in (out / "eval").iterdir()) == [f"step-{m['step']:06d}.parquet" for m in evaluated]


def test_tensorboard_events_carry_the_same_metrics(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, *_ = run
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    steps = metrics(out)
    assert [(e.step, round(e.value, 5)) for e in events.Scalars("reward_mean")] == [
        (m["step"], round(m["reward_mean"], 5)) for m in steps
    ]
    assert [e.step for e in events.Scalars("eval/reward_mean")] == [m["step"] for m in steps if "eval/reward_mean" in m]


def test_mlflow_holds_every_steps_metrics_and_the_config(run):
    from mlflow.tracking import MlflowClient

    out, *_ = run
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the run's file store, read back here
    client = MlflowClient(tracking_uri=(out / "mlruns").as_uri())
    [mlflow_run] = client.search_runs([client.get_experiment_by_name("grpo-orchestrator").experiment_id])
    steps = metrics(out)
    history = client.get_metric_history(mlflow_run.info.run_id, "reward_mean")
    assert [(m.step, round(m.value, 6)) for m in history] == [(m["step"], round(m["reward_mean"], 6)) for m in steps]
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "time/learner_step")] == [m["step"] for m in steps]
    assert mlflow_run.data.params["prompts_column"] == "messages" and mlflow_run.info.run_name == out.name


def test_rendered_prompt_ids_reach_the_engines_unchanged(run):
    """Step 1 is sampled by the untrained model: its engine logprobs equal HF's on the ids that
    apply_chat_template gives, which they would not if the engine had seen other prompt ids."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchestrator.builtin.chat_model import chat_model

    out, records, generations = run
    tokenizer = AutoTokenizer.from_pretrained(chat_model())
    model = AutoModelForCausalLM.from_pretrained(chat_model(), dtype=torch.float32)
    rows = pq.read_table(out / "rollouts" / "step-000001.parquet").to_pylist()
    worst = 0.0
    for row in rows[::generations]:
        expected = tokenizer.apply_chat_template(
            records[row["prompt_index"]]["prompt"], add_generation_prompt=True, return_dict=False
        )
        assert row["prompt_ids"] == expected
        assert row["prompt"] == tokenizer.apply_chat_template(
            records[row["prompt_index"]]["prompt"], tokenize=False, add_generation_prompt=True
        )
        ids = torch.tensor([expected + row["completion_ids"]])
        with torch.no_grad():
            logits = model(ids).logits[0, len(expected) - 1 : -1]
        mine = torch.log_softmax(logits, -1).gather(-1, torch.tensor(row["completion_ids"])[:, None])[:, 0]
        worst = max(worst, float((mine - torch.tensor(row["logprobs"])).abs().max()))
    assert worst < 1e-3
    assert all("<|im_end|>" not in row["completion"] and row["finish_reason"] == "stop" for row in rows[:8])


def test_duplicate_conversations_stay_separate_groups(run):
    out, records, generations = run
    table = pq.read_table(out / "rollouts").to_pylist()
    groups = {}
    for row in table:
        groups.setdefault(row["group_id"], []).append(row)
    assert all(sorted(r["sample_index"] for r in rows) == list(range(generations)) for rows in groups.values())
    duplicates = {row["prompt_index"] for row in table if records[row["prompt_index"]] == records[0]}
    same_prompt_groups = {gid for gid, rows in groups.items() if rows[0]["prompt_index"] in duplicates}
    assert len(same_prompt_groups) >= 2  # identical conversations, each its own group
