"""The one rollout schema that `generate`, `train` and users read, written as Parquet: the only place
a step's samples (samples.py) become an Arrow table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.rollout.samples import Ragged, StepSamples

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
        ("logprobs", pa.list_(pa.float32())),  # null for a tool's observation token
        ("finish_reason", pa.string()),
        ("stop_reason", pa.string()),
        ("stop_token_id", pa.int32()),
        ("engine_id", pa.int32()),
        ("policy_version", pa.int64()),
        ("tool_mask", pa.list_(pa.int8())),  # TRL's: 1 the model's token, 0 a tool's observation token
        ("turns", pa.int32()),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("agent_error", pa.string()),  # why a sample failed before scoring: its agent session, or its group (poison.py)
        ("prefix_mismatches", pa.int32()),  # an agent session's calls that rewrote its history
        ("segment", pa.int32()),  # a split agent session's part, from 0; 0 for every other sample
        # the policy version of each completion token (AReaL's name): several when an update landed mid-sample;
        # -1 for a token no policy sampled (a tool's observation); policy_version is the oldest
        ("output_versions", pa.list_(pa.int64())),
    ]
)


def rollout_table(samples: StepSamples, step: int | None = None) -> pa.Table:
    """One row per sample in the record's order. With `step`: the step first, then whatever the step
    added at the end (reward, advantage, each function's `rewards/<spec>`, and with dynamic sampling
    `filtered`: true for a sample generated but not trained on)."""
    columns = {
        "prompt_index": samples.prompt_index,
        "group_id": samples.group_id,
        "sample_index": samples.sample_index,
        "prompt": samples.prompt,
        "prompt_ids": _list_array(samples.prompt_ids, pa.int32()),
        "completion": samples.completion,
        "completion_ids": _list_array(samples.completion_ids, pa.int32()),
        "logprobs": _list_array(samples.logprobs, pa.float32()),
        "finish_reason": samples.finish_reason,
        "stop_reason": samples.stop_reason,
        "stop_token_id": samples.stop_token_id,
        "engine_id": samples.engine_id,
        "policy_version": samples.policy_version,
        "tool_mask": _list_array(samples.tool_mask, pa.int8()),
        "turns": samples.turns,
        "tool_calls": [[dataclasses.asdict(call) for call in calls] for calls in samples.tool_calls],
        "agent_error": _or_nulls(samples.agent_error, len(samples)),
        "prefix_mismatches": _or_nulls(samples.prefix_mismatches, len(samples)),
        "segment": _or_nulls(samples.segment, len(samples)),
        "output_versions": (
            pa.nulls(len(samples), pa.list_(pa.int64()))
            if samples.output_versions is None
            else _list_array(samples.output_versions, pa.int64())
        ),
    }
    arrays = [
        value if isinstance(value, pa.Array) else pa.array(value, field.type, from_pandas=True)
        for value, field in zip(columns.values(), ROLLOUT_SCHEMA)
    ]
    table = pa.Table.from_arrays(arrays, schema=ROLLOUT_SCHEMA)
    if step is None:
        return table
    table = table.add_column(0, "step", pa.array(np.full(len(samples), step), pa.int64()))
    if samples.reward is not None:
        table = table.append_column("reward", pa.array(samples.reward, pa.float64()))
    if samples.advantage is not None:  # null for a sample not trained on
        table = table.append_column("advantage", pa.array(samples.advantage, pa.float64(), from_pandas=True))
    for name, values in samples.rewards.items():  # null where the function did not apply (it returned None)
        table = table.append_column(name, pa.array(values, pa.float64(), from_pandas=True))
    if samples.filtered is not None:
        table = table.append_column("filtered", pa.array(samples.filtered, pa.bool_()))
    return table


def _or_nulls(column: np.ndarray | None, rows: int) -> np.ndarray:
    return np.full(rows, None, dtype=object) if column is None else column


def _list_array(column: Ragged, value_type: pa.DataType) -> pa.Array:
    """A ragged column as an Arrow list array, sharing its buffers; NaN values are written as null."""
    values = pa.array(column.values, value_type, from_pandas=True)
    return pa.ListArray.from_arrays(pa.array(column.offsets.astype(np.int32), pa.int32()), values)


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write atomically: a reader never sees a half-written file, and a failed write leaves none (on a
    full disk it would hold on to the space). The error of a failed write names `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        pq.write_table(table, partial)
    except BaseException as error:
        partial.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:  # Arrow's write errors name no file
            error.filename = str(path)
        raise
    partial.replace(path)
