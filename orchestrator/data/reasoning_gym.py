"""reasoning-gym's procedural tasks as a prompt source: `prompts: reasoning_gym:NAME`.

reasoning-gym (the `reasoning-gym` package) generates questions with their answers and scores an
answer with the task's own `score_answer`. A source names one task (or `composite`, reasoning-gym's
weighted mix of several); the `reasoning_gym:` settings give its size, seed and the task's own
config. Each row is a conversation, reasoning-gym's system prompt and the question, with three
columns beside it:

    answer           the task's answer (for a user's own reward function)
    reasoning_gym    {"task", "config", "index"} as JSON: enough to build the entry again where the
                     reward runs (builtin/reasoning_gym_answer.py), metadata and all, since reasoning-gym
                     generates entry `index` of a task from its config alone
    reasoning_gym_task  the task that generated the row (a composite's own task per row)

The held-out set (`eval_prompts: reasoning_gym:NAME`) is generated with seed + 1.
"""

from __future__ import annotations

import difflib
import json

from orchestrator.contracts.errors import UserError
from orchestrator.data.prompt_data import PromptData

PREFIX = "reasoning_gym:"


def is_source(spec: str) -> bool:
    return spec.startswith(PREFIX)


def read(spec: str, settings, key: str, seed: int) -> PromptData:
    """The rows of the task `spec` names, generated with `settings` (config.reasoning_gym) and `seed`;
    `key` is the config key that named it (errors name it)."""
    task = spec.removeprefix(PREFIX)
    clash = sorted({"size", "seed"} & set(settings.config))
    if clash:
        raise UserError(f"reasoning_gym.config.{clash[0]}: set reasoning_gym.{clash[0]} instead (the held-out set follows it)")
    config = {**settings.config, "size": settings.size, "seed": seed}
    dataset = _dataset(task, config, key)
    system = _system_prompt(settings.system_prompt)
    records = []
    for index in range(len(dataset)):
        entry = dataset[index]
        records.append(
            {
                "prompt": [*system, {"role": "user", "content": entry["question"]}],
                "answer": str(entry["answer"]),
                "reasoning_gym": json.dumps({"task": task, "config": config, "index": index}),
                "reasoning_gym_task": entry["metadata"].get("source_dataset", task),
            }
        )
    return PromptData.of_records(records)


def tasks() -> list[str]:
    """Every task reasoning-gym registers."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def dataset(task: str, config: dict):
    """reasoning-gym's dataset for `task` and `config` (a composite's `datasets` as {name, weight, config})."""
    import reasoning_gym

    if task == "composite":
        from reasoning_gym.composite import DatasetSpec

        config = {**config, "datasets": [DatasetSpec(**spec) for spec in config.get("datasets", [])]}
    return reasoning_gym.create_dataset(task, **config)


def _dataset(task: str, config: dict, key: str):
    """`dataset`, or a one-line error naming what to fix."""
    if task not in tasks():
        close = difflib.get_close_matches(task, tasks(), n=4, cutoff=0.5)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else "`python -c 'import reasoning_gym.factory as f; print(sorted(f.DATASETS))'` lists them"
        )
        raise UserError(f"{key}: reasoning-gym has no task {task!r} ({hint})")
    try:
        return dataset(task, config)
    except (TypeError, AssertionError, ValueError, KeyError) as error:
        raise UserError(
            f"reasoning_gym.config: reasoning-gym's task {task!r} refused its config {_shown(config)} ({type(error).__name__}: "
            f"{error}); the task's config class lists its keys"
        ) from None


def _system_prompt(name: str | None) -> list[dict]:
    from reasoning_gym.utils import SYSTEM_PROMPTS

    if name is None:
        return []
    if name not in SYSTEM_PROMPTS:
        raise UserError(
            f"reasoning_gym.system_prompt: {name!r} is not one of reasoning-gym's ({', '.join(SYSTEM_PROMPTS)}) or null"
        )
    return [{"role": "system", "content": SYSTEM_PROMPTS[name]}]


def _shown(config: dict) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in ("size", "seed")}, default=str)
