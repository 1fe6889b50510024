"""Samples as an Arrow table: the one rollout schema that `generate`, `train` and users read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.rollout.groups import assemble

TOOL_CALL = pa.struct(
    [("name", pa.string()), ("call", pa.string()), ("result", pa.string()), ("status", pa.string()), ("latency_s", pa.float64())]
)

ROLLOUT_SCHEMA = pa.schema(
    [
        ("prompt_index", pa.int64()),
        ("group_id", pa.int64()),
        ("sample_index", pa.int32()),
        ("prompt", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("completion", pa.string()),
        ("completion_ids", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float32())),
        ("finish_reason", pa.string()),
        ("stop_reason", pa.string()),
        ("stop_token_id", pa.int32()),
        ("engine_id", pa.int32()),
        ("policy_version", pa.int64()),
        ("observation_mask", pa.list_(pa.int8())),  # 1: a tool's observation token (never trained on)
        ("turns", pa.int32()),
        ("tool_calls", pa.list_(TOOL_CALL)),
    ]
)


def rollout_table(requests: list[GroupRequest], results: list[GroupResult]) -> pa.Table:
    """One row per sample, groups in request order, samples in index order."""
    columns: dict[str, list] = {name: [] for name in ROLLOUT_SCHEMA.names}
    for request, result in assemble(requests, results):
        for sample in result.samples:
            columns["prompt_index"].append(request.prompt_index)
            columns["group_id"].append(request.group_id)
            columns["sample_index"].append(sample.sample_index)
            columns["prompt"].append(request.prompt)
            columns["prompt_ids"].append(request.prompt_ids)
            columns["completion"].append(sample.completion)
            columns["completion_ids"].append(sample.completion_ids)
            columns["logprobs"].append(sample.logprobs)
            columns["finish_reason"].append(sample.finish_reason)
            columns["stop_reason"].append(sample.stop_reason)
            columns["stop_token_id"].append(sample.stop_token_id)
            columns["engine_id"].append(result.engine_id)
            columns["policy_version"].append(result.policy_version)
            columns["observation_mask"].append(sample.observation_mask or [0] * len(sample.completion_ids))
            columns["turns"].append(sample.turns)
            columns["tool_calls"].append([dataclasses.asdict(call) for call in sample.tool_calls])
    return pa.table(columns, schema=ROLLOUT_SCHEMA)


def with_training_columns(table: pa.Table, step: int, scores: dict, advantages) -> pa.Table:
    """The rollout table as `train` writes it: the step first, then each sample's reward, advantage
    and per-function rewards (`rewards/<spec>`) at the end."""
    table = table.add_column(0, "step", pa.array([step] * table.num_rows, pa.int64()))
    table = table.append_column("reward", pa.array(scores["reward"], pa.float64()))
    table = table.append_column("advantage", pa.array(advantages, pa.float64()))
    for name, values in scores.items():
        if name.startswith("rewards/"):
            table = table.append_column(name, pa.array(values, pa.float64()))
    return table


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write atomically: a reader never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    pq.write_table(table, partial)
    partial.replace(path)
