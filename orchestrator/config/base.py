"""Config errors worded for the user: each names the (dotted) key, what was given and what was expected."""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError

from orchestrator.contracts.errors import UserError


class ConfigError(UserError):
    """A configuration problem, worded for the user: which key, what was given, what was expected."""


def explain(error: ValidationError, model: type[BaseModel], prefix: str = "") -> ConfigError:
    """Turn pydantic's error list into one message that names each bad key (dotted)."""
    lines = []
    for item in _meant(error.errors()):
        key = prefix + ".".join(str(part) for part in item["loc"])
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown config key '{key}'{_suggestion(key, model)}")
        elif not key:  # a check across several keys; its message names them
            lines.append(item["msg"].removeprefix("Value error, "))
        else:
            given = item.get("input")
            lines.append(f"config key '{key}': {item['msg']} (got {given!r})")
    return ConfigError("\n".join(lines))


def _meant(errors: list[dict]) -> list[dict]:
    """Of a value that fits none of its field's types (`prompts: str | list[...]`), the errors of the
    type it was meant as: a type whose only error is that the value is not of it goes when another type
    has more to say, and the type's name leaves the key (`prompts.0.ratio`, not `prompts.list[...].0.ratio`)."""
    wrong_type = [item for item in errors if item["type"].endswith("_type") and len(item["loc"]) >= 2]
    dropped, branches = [], set()
    for item in wrong_type:
        field, branch = item["loc"][:-1], item["loc"][-1]
        others = [o for o in errors if o is not item and o["loc"][: len(field)] == field and len(o["loc"]) > len(field) + 1]
        if others and all(o["loc"][len(field)] != branch for o in others):
            dropped.append(item)
            branches.update((field, o["loc"][len(field)]) for o in others)
    kept = []
    for item in errors:
        if any(item is d for d in dropped):
            continue
        loc = item["loc"]
        for field, branch in branches:
            if loc[: len(field)] == field and len(loc) > len(field) and loc[len(field)] == branch:
                loc = (*field, *loc[len(field) + 1 :])
        kept.append({**item, "loc": loc})
    return kept


def _suggestion(dotted_key: str, model: type[BaseModel]) -> str:
    *parents, leaf = dotted_key.split(".")
    for parent in parents:
        field = model.model_fields.get(parent)
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
    close = difflib.get_close_matches(leaf, list(model.model_fields), n=1)
    return f"; did you mean '{'.'.join([*parents, close[0]])}'?" if close else ""
