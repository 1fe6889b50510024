"""`StepSamples`: a step's samples as one columnar record, from assembly to the learner and the Parquet file.

    samples = StepSamples.assemble(requests, results)   # groups in request order, every shape checked
    samples.reward, samples.advantage = ...             # the step adds its scores
    learner_batch(samples, samples.advantage, pad)      # training/batch.py: padded arrays for TRL
    write_parquet(rollout_table(samples, step), path)   # parquet.py: the one place Arrow appears

Built once after assembly (groups.py checks each group's shape); rewards, advantages, the learner's
batch, the metrics and evaluation all read these numpy columns. Token columns are ragged: one flat
array plus row offsets, so a step of thousands of samples is a few arrays, not thousands of lists.
Masks carry TRL's names and polarity: `tool_mask` is 1 for the model's own tokens and 0 for a
tool's observation tokens, which are context, never trained on (their logprob is NaN).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample, ToolCall
from orchestrator.rollout.groups import assemble


@dataclasses.dataclass(frozen=True)
class Ragged:
    """Rows of different lengths: row i is `values[offsets[i]:offsets[i + 1]]`."""

    values: np.ndarray
    offsets: np.ndarray  # int64, one more than the rows

    @classmethod
    def of(cls, rows: list, dtype) -> Ragged:
        lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter((value for row in rows for value in row), dtype=dtype, count=int(offsets[-1]))
        return cls(values, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row: int) -> np.ndarray:
        return self.values[self.offsets[row] : self.offsets[row + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sums(self) -> np.ndarray:
        """Each row's sum (0 for an empty row)."""
        totals = np.concatenate([[0], np.cumsum(self.values, dtype=np.float64)])
        return totals[self.offsets[1:]] - totals[self.offsets[:-1]]

    def last(self, empty=-1) -> np.ndarray:
        """Each row's last value (`empty` for an empty row)."""
        ends = self.offsets[1:]
        present = ends > self.offsets[:-1]
        out = np.full(len(self), empty, dtype=np.result_type(self.values.dtype, np.asarray(empty).dtype))
        out[present] = self.values[ends[present] - 1]
        return out

    def padded(self, width: int, fill, dtype, left: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(rows x width array, its 0/1 mask): right-padded, or left-padded with `left`."""
        lengths = self.lengths
        columns = np.arange(width)
        mask = columns >= (width - lengths)[:, None] if left else columns < lengths[:, None]
        out = np.full((len(self), width), fill, dtype=dtype)
        out[mask] = self.values  # row-major order of the mask is the rows' order
        return out, mask.astype(np.int64)

    def tolist(self) -> list[list]:
        return [self[row].tolist() for row in range(len(self))]

    def take(self, rows: np.ndarray) -> Ragged:
        """The rows at the indices `rows`, in that order."""
        return Ragged.of([self[row] for row in rows], self.values.dtype)

    @staticmethod
    def concat(parts: list[Ragged]) -> Ragged:
        offsets = [parts[0].offsets]
        for part in parts[1:]:
            offsets.append(part.offsets[1:] + offsets[-1][-1])
        return Ragged(np.concatenate([part.values for part in parts]), np.concatenate(offsets))


@dataclasses.dataclass
class StepSamples:
    # One entry per sample: groups in request order, samples in index order.
    prompt_index: np.ndarray  # int64: the prompt's position in the prompt file
    group_id: np.ndarray  # int64
    sample_index: np.ndarray  # int32
    prompt: np.ndarray  # object: str
    prompt_ids: Ragged  # int32
    completion: np.ndarray  # object: str
    completion_ids: Ragged  # int32
    logprobs: Ragged  # float32, of the distribution sampled; NaN for a tool's observation tokens
    tool_mask: Ragged  # int8: 1 the model's token, 0 a tool's observation token
    finish_reason: np.ndarray  # object: "stop" or "length"
    stop_reason: np.ndarray  # object: the stop string or token id (as text) that fired, or None
    stop_token_id: np.ndarray  # object: int or None
    engine_id: np.ndarray  # int32
    policy_version: np.ndarray  # int64: the policy of its oldest token (the one staleness is counted from)
    turns: np.ndarray  # int32
    tool_calls: list[list[ToolCall]]
    # Agent samples (workers/agents/): why the session failed (None: it did not), and how many of its calls
    # rewrote its history. None for a record built from tokens alone.
    agent_error: np.ndarray | None = None  # object: str or None
    prefix_mismatches: np.ndarray | None = None  # int32
    # A split agent session's part (agent.on_prefix_mismatch: split): its rows share the session's group_id and
    # sample_index and follow one another, numbered from 0; 0 for every other sample.
    segment: np.ndarray | None = None  # int32
    # The policy version of each completion token (AReaL's name): a sample that an update landed in carries two
    # or more; -1 for a token no policy sampled (a tool's observation). None for a record built from tokens alone.
    output_versions: Ragged | None = None  # int64
    # Set by the step (training/loop.py), in the same order.
    reward: np.ndarray | None = None  # float64: the weighted sum of the reward functions
    advantage: np.ndarray | None = None  # float64; NaN for a sample not trained on
    rewards: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # per function: "rewards/<spec>"
    filtered: np.ndarray | None = None  # bool: generated but not trained on (dynamic sampling); None: none were

    @classmethod
    def assemble(cls, requests: list[GroupRequest], results: list[GroupResult]) -> StepSamples:
        """One record of every sample, groups in request order (each group's shape checked)."""
        rows = [(request, result, sample) for request, result in assemble(requests, results) for sample in result.samples]
        versions = [_output_versions(result, sample) for _, result, sample in rows]

        def column(get, dtype=object) -> np.ndarray:
            return np.fromiter((get(*row) for row in rows), dtype=dtype, count=len(rows))

        def objects(get) -> np.ndarray:
            out = np.empty(len(rows), dtype=object)
            out[:] = [get(*row) for row in rows]
            return out

        return cls(
            prompt_index=column(lambda q, r, s: q.prompt_index, np.int64),
            group_id=column(lambda q, r, s: q.group_id, np.int64),
            sample_index=column(lambda q, r, s: s.sample_index, np.int32),
            prompt=objects(lambda q, r, s: q.prompt),
            prompt_ids=Ragged.of([q.prompt_ids if s.prompt_ids is None else s.prompt_ids for q, _, s in rows], np.int32),
            completion=objects(lambda q, r, s: s.completion),
            completion_ids=Ragged.of([s.completion_ids for _, _, s in rows], np.int32),
            logprobs=Ragged.of([[np.nan if v is None else v for v in s.logprobs] for _, _, s in rows], np.float32),
            tool_mask=Ragged.of([s.tool_mask or [1] * len(s.completion_ids) for _, _, s in rows], np.int8),
            finish_reason=objects(lambda q, r, s: s.finish_reason),
            stop_reason=objects(lambda q, r, s: s.stop_reason),
            stop_token_id=objects(lambda q, r, s: s.stop_token_id),
            engine_id=column(lambda q, r, s: r.engine_id, np.int32),
            policy_version=np.fromiter(
                (_oldest(tokens, r.policy_version) for tokens, (_, r, _) in zip(versions, rows)), np.int64, len(rows)
            ),
            turns=column(lambda q, r, s: s.turns, np.int32),
            tool_calls=[list(s.tool_calls) for _, _, s in rows],
            agent_error=objects(lambda q, r, s: s.error),
            prefix_mismatches=column(lambda q, r, s: s.prefix_mismatches, np.int32),
            segment=column(lambda q, r, s: s.segment, np.int32),
            output_versions=Ragged.of(versions, np.int64),
        )

    @classmethod
    def from_tokens(cls, prompt_ids: list, completion_ids: list, logprobs: list) -> StepSamples:
        """Samples of token ids alone, each its own group and sample 0 (no text, no tool calls): the
        learner's side of a step, for measuring the learner without engines (bench/learner_memory.py)."""
        rows = len(prompt_ids)
        blank = np.full(rows, "", dtype=object)
        return cls(
            prompt_index=np.arange(rows, dtype=np.int64),
            group_id=np.arange(rows, dtype=np.int64),
            sample_index=np.zeros(rows, dtype=np.int32),
            prompt=blank,
            prompt_ids=Ragged.of(prompt_ids, np.int32),
            completion=blank.copy(),
            completion_ids=Ragged.of(completion_ids, np.int32),
            logprobs=Ragged.of(logprobs, np.float32),
            tool_mask=Ragged.of([[1] * len(ids) for ids in completion_ids], np.int8),
            finish_reason=np.full(rows, "length", dtype=object),
            stop_reason=np.full(rows, None, dtype=object),
            stop_token_id=np.full(rows, None, dtype=object),
            engine_id=np.zeros(rows, dtype=np.int32),
            policy_version=np.zeros(rows, dtype=np.int64),
            turns=np.ones(rows, dtype=np.int32),
            tool_calls=[[] for _ in range(rows)],
            segment=np.zeros(rows, dtype=np.int32),
        )

    def __len__(self) -> int:
        return len(self.group_id)

    def set_scores(self, scores: dict) -> None:
        """Take a step's scores (rewards/scoring.py: "reward" and each function's "rewards/<spec>", in
        this record's order, a split session's repeated over its segments); NaN where a function did not apply."""
        self.reward = np.asarray(scores["reward"], dtype=np.float64)
        self.rewards = {name: np.asarray(values, np.float64) for name, values in scores.items() if name.startswith("rewards/")}

    def sessions(self) -> np.ndarray:
        """bool: the rows that stand for a sample in its group's statistics (a split session counts once)."""
        return np.ones(len(self), dtype=bool) if self.segment is None else self.segment == 0

    def session_last_rows(self) -> np.ndarray:
        """For each row, the row of its session's last segment (itself, unless the session was split). A
        record holds whole sessions: it is built, taken and joined by whole groups."""
        rows = np.arange(len(self))
        if self.segment is None or not self.segment.any():
            return rows
        starts = rows[self.sessions()]
        ends = np.append(starts[1:], len(self)) - 1
        return ends[np.cumsum(self.sessions()) - 1]

    def take(self, rows: np.ndarray) -> StepSamples:
        """The samples at the indices `rows`, in that order."""
        return StepSamples(**{field.name: _take(getattr(self, field.name), rows) for field in dataclasses.fields(self)})

    @classmethod
    def concat(cls, parts: list[StepSamples]) -> StepSamples:
        """One record of several, in order (each with the same step-set columns)."""
        return cls(**{field.name: _concat([getattr(part, field.name) for part in parts]) for field in dataclasses.fields(cls)})

    def model_tokens(self) -> np.ndarray:
        """Each sample's own tokens (a tool's observation tokens left out)."""
        return self.tool_mask.sums()


def _output_versions(result: GroupResult, sample: Sample) -> list[int]:
    """Each completion token's policy version: the engine's stamps, or its group's version where it sent none;
    -1 for a token the model did not sample (tool_mask 0)."""
    stamped = sample.output_versions or [result.policy_version] * len(sample.completion_ids)
    if sample.tool_mask is None:
        return list(stamped)
    return [version if own else -1 for version, own in zip(stamped, sample.tool_mask)]


def _oldest(versions: list[int], group_version: int) -> int:
    sampled = [version for version in versions if version >= 0]
    return min(sampled) if sampled else group_version


def _take(column, rows: np.ndarray):
    if column is None:
        return None
    if isinstance(column, dict):
        return {name: values[rows] for name, values in column.items()}
    if isinstance(column, list):
        return [column[row] for row in rows]
    return column.take(rows) if isinstance(column, Ragged) else column[rows]


def _concat(columns: list):
    first = columns[0]
    if first is None:
        return None
    if isinstance(first, dict):
        return {name: np.concatenate([column[name] for column in columns]) for name in first}
    if isinstance(first, list):
        return [row for column in columns for row in column]
    return Ragged.concat(columns) if isinstance(first, Ragged) else np.concatenate(columns)
