"""Reward functions: TRL's signature `fn(prompts, completions, completion_ids, **kwargs) -> list[float]`.

Referenced as `path/to/file.py:name`, `package.module:name` or `builtin:NAME` (see
user_functions.py). An entry with no `:NAME` is a reward model (TRL's convention: contracts/reward_models.py),
which the run's reward-model workers score (rewards/models.py): to the code here it is one more
function, whose scores come from a worker. They run in a Ray task, so a reward that is heavy (a model, a sandbox) runs
wherever the cluster has room, not in the driver; a task loads the reward files the driver read
(`user_files`), not its node's copies.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Mapping

from orchestrator.contracts import builtins, user_functions
from orchestrator.contracts.environments import ENVIRONMENT_REWARD
from orchestrator.contracts.errors import RunError, UserError
from orchestrator.contracts.reward_models import is_model, reward_name
from orchestrator.contracts.user_functions import UserFile


class RewardError(UserError):
    """A reward function failed or returned something unusable; names the function and sample."""


def resolve(spec: str, files: Mapping[str, UserFile] | None = None, reward_models: list | None = None) -> Callable:
    """Import the function a reward spec names (from `files`, the driver's copies, where they hold its
    file); errors say which spec and why. A reward model's spec becomes a function that asks one of
    `reward_models` (the workers' actor handles) for its scores."""
    if spec.startswith(ENVIRONMENT_REWARD):
        return _environment_reward(spec.removeprefix(ENVIRONMENT_REWARD))
    if is_model(spec):
        if not reward_models:
            raise UserError(f"reward_funcs: {spec!r} is a reward model, and no reward-model worker serves it here")
        return _model_reward(spec, reward_models)
    return user_functions.resolve(spec, "reward_funcs", builtins.REWARDS, files)


def _environment_reward(class_name: str) -> Callable:
    """The reward of environments of class `class_name`: what each sample's `get_reward()` returned on its
    rollout node, None (not applicable) for samples of another environment (TRL's exact-class rule)."""

    def reward(prompts, completions, environment_reward, environment_class, **kwargs):
        return [value if cls == class_name else None for value, cls in zip(environment_reward, environment_class)]

    reward.__name__ = class_name
    return reward


class RewardModelLostError(RunError):
    """A reward-model worker died for good (past `reward_models.max_restarts`): every later score would
    fail too, so the run stops instead of scoring `reward_error_score` from then on."""


def _model_reward(spec: str, workers: list) -> Callable:
    """A reward function whose scores come from the workers: the samples split evenly over them."""

    def reward(prompts, completions, **kwargs):
        import ray

        count = len(prompts)
        bounds = [count * i // len(workers) for i in range(len(workers) + 1)]
        parts = [(worker, start, stop) for worker, start, stop in zip(workers, bounds, bounds[1:]) if stop > start]
        refs = [worker.score.remote(spec, list(prompts[a:b]), list(completions[a:b])) for worker, a, b in parts]
        try:
            return [score for part in ray.get(refs) for score in part]
        except ray.exceptions.RayActorError as error:
            raise RewardModelLostError(f"reward model {spec!r}: a worker died past reward_models.max_restarts: {error}") from None

    reward.__name__ = spec
    return reward


def ship(specs: list[str]) -> dict[str, UserFile]:
    """The reward files as the driver read them, for `score`'s `user_files`."""
    return user_functions.ship(dict.fromkeys(specs, "reward_funcs"))


def score(
    specs: list[str],
    weights: list[float] | None,
    prompts,
    completions,
    completion_ids,
    error_score: float | None = None,
    user_files: Mapping[str, UserFile] | None = None,
    reward_models: list | None = None,
    judges: dict | None = None,
    sample_errors: list[str | None] | None = None,
    rows_of: Mapping[str, list[int]] | None = None,
    **kwargs,
) -> dict[str, list[float]]:
    """Every reward function on every sample, plus their weighted sum under "reward".

    TRL's conventions: a function may return None for a sample it does not apply to (that sample's
    `rewards/<spec>` is NaN and the weighted sum leaves the function out, TRL's nansum), and an
    `async def` function is awaited (those of one call run concurrently). A function that raises or
    returns NaN or an infinity, and a sample that no function scores, stop the run with an error naming the function
    and the sample, unless `error_score` is set: then that sample scores `error_score` and is counted
    under "reward_errors". `user_files`: the reward files as the driver read them (`ship`), loaded
    instead of this node's copies; `reward_models`: the reward-model workers, for specs that are models;
    `judges`: {name: Judge} (orchestrator/judges/client.py), given to every function as its `judges`
    keyword argument when the run has any; `sample_errors`: why each sample failed before it could be
    scored (an agent session that failed, a group that kept killing its engines; None: it did not), a failed
    sample scoring `error_score` whatever the functions gave it, or stopping the run with its error when
    `error_score` is not set; `rows_of`: the rows (indices) each function scores, when not all (a
    prompt source with functions of its own: contracts/reward_plan.py): a function is called on its
    rows alone, and is NaN on the others."""
    weights = weights or [1.0] * len(specs)
    fns = {spec: resolve(spec, user_files, reward_models) for spec in specs}  # each file's module is loaded once per process
    args = {"prompts": prompts, "completions": completions, "completion_ids": completion_ids, **kwargs}
    shared = {"judges": judges} if judges else {}  # the same for every sample: never cut per sample
    scores, errors = _each_function(fns, args, shared, rows_of or {}, error_score)
    total, unscored = _weighted_sum([scores[f"rewards/{reward_name(spec)}"] for spec in specs], weights)
    failed = [index for index, error in enumerate(sample_errors or []) if error is not None]
    if failed:
        if error_score is None:
            raise RewardError(f"{sample_errors[failed[0]]} (set reward_error_score to score such samples)")
        for index in failed:
            total[index] = error_score
        errors += len(failed)
        unscored = sorted(set(unscored) - set(failed))
    if unscored:
        if error_score is None:
            index = unscored[0]
            raise RewardError(
                f"no reward function scored sample {index} ({_describe(index, completions, kwargs)}): every one of "
                f"{specs} returned None for it (set reward_error_score to score such samples)"
            )
        for index in unscored:
            total[index] = error_score
        errors += len(unscored)
    scores["reward"] = total
    scores["reward_errors"] = errors
    return scores


def _each_function(fns: dict[str, Callable], args: dict, shared: dict, rows_of: Mapping, error_score: float | None):
    """({"rewards/<name>": values on every row}, samples scored error_score): each function called on
    its rows (`rows_of[spec]`; all when absent), NaN on the others."""
    rows = {spec: rows_of.get(spec) for spec in fns}  # None: every row
    cut = {spec: args if rows[spec] is None else _rows(args, rows[spec]) for spec in fns}
    returned = _call_all({spec: fn for spec, fn in fns.items() if rows[spec] != []}, cut, shared)
    scores, errors, count = {}, 0, len(args["prompts"])
    for spec, fn in fns.items():
        values, failed = [], 0
        if rows[spec] != []:
            values, failed = _values(spec, fn, returned[spec], cut[spec], shared, error_score)
        scores[f"rewards/{reward_name(spec)}"] = values if rows[spec] is None else _spread(values, rows[spec], count)
        errors += failed
    return scores, errors


def _values(spec: str, fn: Callable, result, args: dict, shared: dict, error_score: float | None) -> tuple[list[float], int]:
    """One function's scores from what it returned on the batch (`result`, or the exception it raised),
    and how many samples scored `error_score` because it failed on them (each then scored alone)."""
    count = len(args["prompts"])
    try:
        if isinstance(result, Exception):
            raise result
        return _check(spec, result, count), 0
    except RunError:  # a reward model or judge lost for good (RewardModelLostError, JudgeLostError): the run stops
        raise
    except RewardError:
        if error_score is None:
            raise
        return _per_sample(fn, args, shared, count, error_score)
    except Exception as error:
        if error_score is None:
            index = _first_failing(fn, args, shared, count)
            where = f" on sample {index} ({_describe(index, args['completions'], args)})" if index is not None else ""
            raise RewardError(f"reward function {spec!r} raised {type(error).__name__}: {error}{where}") from None
        return _per_sample(fn, args, shared, count, error_score)


def _rows(args: dict, rows: list[int]) -> dict:
    """The per-sample arguments of these rows only."""
    return {key: [value[i] for i in rows] for key, value in args.items()}


def _spread(values: list[float], rows: list[int], count: int) -> list[float]:
    """A function's values on its rows, placed among `count` rows, NaN (not scored) elsewhere."""
    spread = [math.nan] * count
    for row, value in zip(rows, values):
        spread[row] = value
    return spread


def _call_all(fns: dict[str, Callable], args: dict[str, dict], shared: dict) -> dict[str, object]:
    """Each function's return value (or the exception it raised) on its rows of the batch (`args[spec]`);
    what async functions return is awaited, all of them together."""
    returned, pending = {}, {}
    for spec, fn in fns.items():
        try:
            result = fn(**args[spec], **shared)
        except Exception as error:
            returned[spec] = error
            continue
        if inspect.isawaitable(result):
            pending[spec] = result
        else:
            returned[spec] = result
    if pending:
        returned.update(zip(pending, asyncio.run(_gather(pending.values()))))
    return returned


async def _gather(awaitables) -> list:
    return await asyncio.gather(*awaitables, return_exceptions=True)


def _weighted_sum(per_function: list[list[float]], weights: list[float]) -> tuple[list[float], list[int]]:
    """The weighted sum per sample over the functions that scored it (NaN: did not apply), and the
    samples that none scored."""
    total = [0.0] * (len(per_function[0]) if per_function else 0)
    scored = [False] * len(total)
    for values, weight in zip(per_function, weights):
        for index, value in enumerate(values):
            if not math.isnan(value):
                total[index] += weight * value
                scored[index] = True
    return total, [index for index, done in enumerate(scored) if not done]


def _one(fn, args: dict, shared: dict, i: int):
    """`fn` on sample i alone (awaited if it is async)."""
    result = fn(**{key: value[i : i + 1] for key, value in args.items()}, **shared)
    return asyncio.run(_awaited(result)) if inspect.isawaitable(result) else result


async def _awaited(result):
    return await result


def _first_failing(fn, args: dict, shared: dict, count: int) -> int | None:
    """Find which sample makes a batch call fail, by scoring samples one at a time."""
    for i in range(count):
        try:
            values = _one(fn, args, shared, i)
            if len(values) != 1 or (values[0] is not None and not math.isfinite(float(values[0]))):
                return i
        except Exception:
            return i
    return None


def _per_sample(fn, args: dict, shared: dict, count: int, error_score: float) -> tuple[list[float], int]:
    """Each sample scored alone; one that fails scores `error_score` (None still means "not applicable")."""
    values, failed = [], 0
    for i in range(count):
        try:
            value = _one(fn, args, shared, i)[0]
            if value is None:
                value = math.nan  # not applicable: left out of the weighted sum
            elif not math.isfinite(value := float(value)):
                raise ValueError(f"{value}")
        except Exception:
            value, failed = error_score, failed + 1
        values.append(value)
    return values, failed


def _describe(index: int, completions, kwargs) -> str:
    parts = [f"{key} {kwargs[key][index]}" for key in ("group_id", "sample_index") if key in kwargs]
    return ", ".join([*parts, f"completion {_text(completions[index])[:80]!r}"])


def _text(completion) -> str:
    """A completion's text, plain or conversational (TRL's `[{"role": "assistant", "content": ...}]`)."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def _check(spec: str, values, count: int) -> list[float]:
    """The values as floats, None as NaN (not applicable); an explicit NaN or infinity is an error."""
    try:
        values = list(values)
        bad = [i for i, v in enumerate(values) if v is not None and not math.isfinite(float(v))]
        values = [math.nan if v is None else float(v) for v in values]
    except (TypeError, ValueError) as error:
        raise RewardError(f"reward function {spec!r} returned non-numbers: {error}") from None
    if len(values) != count:
        raise RewardError(f"reward function {spec!r} returned {len(values)} values for {count} samples")
    if bad:
        raise RewardError(
            f"reward function {spec!r} returned {values[bad[0]]} for sample {bad[0]} (of {len(bad)} not finite): "
            "return a finite number, or None where the function does not apply"
        )
    return values
