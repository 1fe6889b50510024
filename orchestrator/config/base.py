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
    for item in error.errors():
        key = prefix + ".".join(str(part) for part in item["loc"])
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown config key '{key}'{_suggestion(key, model)}")
        elif not key:  # a check across several keys; its message names them
            lines.append(item["msg"].removeprefix("Value error, "))
        else:
            given = item.get("input")
            lines.append(f"config key '{key}': {item['msg']} (got {given!r})")
    return ConfigError("\n".join(lines))


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
