"""Reward functions: TRL's signature `fn(prompts, completions, completion_ids, **kwargs) -> list[float]`.

Referenced as `path/to/file.py:name`, `package.module:name` or `builtin:NAME`. They are resolved on
the driver before anything starts (so a typo fails at once) and run in a Ray task, off the
driver, so a slow reward does not stall the loop.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import UserError

BUILTIN = {"search_call": "orchestrator.builtin.search_task:search_call_reward"}


class RewardError(UserError):
    """A reward function failed or returned something unusable; names the function and sample."""


def resolve(spec: str) -> Callable:
    """Import the function a reward spec names; errors say which spec and why."""
    target = BUILTIN.get(spec.removeprefix("builtin:"), spec) if spec.startswith("builtin:") else spec
    if spec.startswith("builtin:") and spec.removeprefix("builtin:") not in BUILTIN:
        raise UserError(f"reward_funcs: unknown built-in {spec!r} (built-ins: {', '.join('builtin:' + k for k in BUILTIN)})")
    source, sep, name = target.rpartition(":")
    if not sep or not source or not name:
        raise UserError(f"reward_funcs: {spec!r} is not 'file.py:name', 'module:name' or 'builtin:NAME'")
    try:
        module = _load_file(source) if source.endswith(".py") else importlib.import_module(source)
    except UserError:
        raise
    except Exception as error:  # the user's module failed to import: say which and why
        raise UserError(f"reward_funcs: cannot import {source!r} for {spec!r}: {type(error).__name__}: {error}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UserError(f"reward_funcs: {source!r} has no function {name!r} (from {spec!r})")
    return fn


def _load_file(path: str):
    file = Path(path)
    if not file.is_file():
        raise UserError(f"reward_funcs: file {path} does not exist")
    module_spec = importlib.util.spec_from_file_location(f"user_reward_{file.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def score(specs: list[str], weights: list[float] | None, prompts, completions, completion_ids, **kwargs) -> dict[str, list[float]]:
    """Every reward function on every sample, plus their weighted sum under "reward"."""
    weights = weights or [1.0] * len(specs)
    total = [0.0] * len(prompts)
    scores = {}
    for spec, weight in zip(specs, weights):
        values = resolve(spec)(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        values = _check(spec, values, len(prompts))
        scores[f"rewards/{spec}"] = values
        total = [t + weight * v for t, v in zip(total, values)]
    scores["reward"] = total
    return scores


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
