"""Reward functions: TRL's signature `fn(prompts, completions, completion_ids, **kwargs) -> list[float]`.

Referenced as `path/to/file.py:name`, `package.module:name` or `builtin:NAME` (see
user_functions.py). They run in a Ray task, so a reward that is heavy (a model, a sandbox) runs
wherever the cluster has room, not in the driver.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from orchestrator.contracts import builtins, user_functions
from orchestrator.contracts.errors import UserError

_resolved: dict[str, Callable] = {}  # per worker process: import each reward file once


class RewardError(UserError):
    """A reward function failed or returned something unusable; names the function and sample."""


def resolve(spec: str) -> Callable:
    """Import the function a reward spec names; errors say which spec and why."""
    return user_functions.resolve(spec, "reward_funcs", builtins.REWARDS)


def score(
    specs: list[str],
    weights: list[float] | None,
    prompts,
    completions,
    completion_ids,
    error_score: float | None = None,
    **kwargs,
) -> dict[str, list[float]]:
    """Every reward function on every sample, plus their weighted sum under "reward".

    A function that raises or returns NaN stops the run with an error naming the function and
    the sample, unless `error_score` is set: then that sample scores `error_score` and is counted
    under "reward_errors"."""
    weights = weights or [1.0] * len(specs)
    total = [0.0] * len(prompts)
    scores, errors = {}, 0
    for spec, weight in zip(specs, weights):
        fn = _resolved.get(spec) or _resolved.setdefault(spec, resolve(spec))
        try:
            values = _check(
                spec, fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs), len(prompts)
            )
        except RewardError:
            if error_score is None:
                raise
            values, failed = _per_sample(spec, fn, prompts, completions, completion_ids, kwargs, error_score)
            errors += failed
        except Exception as error:
            if error_score is None:
                index = _first_failing(fn, prompts, completions, completion_ids, kwargs)
                where = f" on sample {index} ({_describe(index, completions, kwargs)})" if index is not None else ""
                raise RewardError(f"reward function {spec!r} raised {type(error).__name__}: {error}{where}") from None
            values, failed = _per_sample(spec, fn, prompts, completions, completion_ids, kwargs, error_score)
            errors += failed
        scores[f"rewards/{spec}"] = values
        total = [t + weight * v for t, v in zip(total, values)]
    scores["reward"] = total
    scores["reward_errors"] = errors
    return scores


def _one(fn, prompts, completions, completion_ids, kwargs, i: int):
    return fn(
        prompts=prompts[i : i + 1],
        completions=completions[i : i + 1],
        completion_ids=completion_ids[i : i + 1],
        **{k: v[i : i + 1] for k, v in kwargs.items()},
    )


def _first_failing(fn, prompts, completions, completion_ids, kwargs) -> int | None:
    """Find which sample makes a batch call fail, by scoring samples one at a time."""
    for i in range(len(prompts)):
        try:
            values = _one(fn, prompts, completions, completion_ids, kwargs, i)
            if len(values) != 1 or math.isnan(float(values[0])):
                return i
        except Exception:
            return i
    return None


def _per_sample(spec, fn, prompts, completions, completion_ids, kwargs, error_score: float) -> tuple[list[float], int]:
    values, failed = [], 0
    for i in range(len(prompts)):
        try:
            value = float(_one(fn, prompts, completions, completion_ids, kwargs, i)[0])
            if math.isnan(value):
                raise ValueError("NaN")
        except Exception:
            value, failed = error_score, failed + 1
        values.append(value)
    return values, failed


def _describe(index: int, completions, kwargs) -> str:
    parts = [f"{key} {kwargs[key][index]}" for key in ("group_id", "sample_index") if key in kwargs]
    return ", ".join([*parts, f"completion {completions[index][:80]!r}"])


def _check(spec: str, values, count: int) -> list[float]:
    try:
        values = [float(v) for v in values]
    except (TypeError, ValueError) as error:
        raise RewardError(f"reward function {spec!r} returned non-numbers: {error}") from None
    if len(values) != count:
        raise RewardError(f"reward function {spec!r} returned {len(values)} values for {count} samples")
    bad = [i for i, v in enumerate(values) if math.isnan(v)]
    if bad:
        raise RewardError(f"reward function {spec!r} returned NaN for sample {bad[0]} (of {len(bad)})")
    return values
