"""Relative paths in a config file are read from the config file's folder, so a config runs from any
folder: `train --config /abs/configs/recipes/dapo.yaml` finds the reward file `overlong.py` next to
it. On the command line (`key=value`), paths stay relative to the current folder.

A relative value is taken from the config's folder when a file or folder of that name is there;
otherwise it is kept as written, since the same keys also hold names that are no paths (a hub id such
as `Qwen/Qwen2-0.5B`, `builtin:search`, a chat template's text). Which keys hold paths is marked on
their fields (contracts/paths.py). The result is absolute, so the run folder's config.yaml resumes
from anywhere too.
"""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel


def from_config_folder(data: dict, model: type[BaseModel], folder: Path) -> dict:
    """`data` (a config file's mapping for `model`) with its relative paths made absolute from `folder`."""
    out = dict(data)
    folder = folder.resolve()
    for name, field in model.model_fields.items():
        if name not in out:
            continue
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        kind, value = extra.get("relative_path"), out[name]
        if kind is not None:
            out[name] = _marked_from_config_folder(value, kind, section_model(field.annotation), folder)
        elif (section := section_model(field.annotation)) is not None:
            if typing.get_origin(field.annotation) is dict and isinstance(value, dict):  # named sections (`judges`)
                out[name] = {key: _section_from_config_folder(item, section, folder) for key, item in value.items()}
            else:
                out[name] = _section_from_config_folder(value, section, folder)
    return out


def _marked_from_config_folder(value, kind: str, section: type[BaseModel] | None, folder: Path):
    """A marked field's value: a path or spec, a list of them (whose mappings are `section`s, as `tools`' text-tag
    entries), or a mapping of names to them (`environment_factory`)."""
    if isinstance(value, list):
        return [_marked_from_config_folder(item, kind, section, folder) for item in value]
    if isinstance(value, dict):
        if section is not None:
            return from_config_folder(value, section, folder)
        return {key: _resolve(item, kind, folder) for key, item in value.items()}
    return _resolve(value, kind, folder)


def _section_from_config_folder(value, section: type[BaseModel], folder: Path):
    """A nested section (a mapping, or a list of them, as `tools`) with its relative paths made absolute."""
    if isinstance(value, dict):
        return from_config_folder(value, section, folder)
    if isinstance(value, list):
        return [from_config_folder(item, section, folder) if isinstance(item, dict) else item for item in value]
    return value


def section_model(annotation) -> type[BaseModel] | None:
    """The config model a field holds: itself, in a list, or optional."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        if (section := section_model(argument)) is not None:
            return section
    return None


def _resolve(value, kind: str, folder: Path):
    if not isinstance(value, str):
        return value
    if kind == "spec":
        file, sep, name = value.rpartition(":")
        if not sep:  # a reward model: a folder (or a hub id)
            return _beside(value, folder)
        return f"{_beside(file, folder)}:{name}" if file.endswith(".py") else value
    return _beside(value, folder)


def _beside(value: str, folder: Path) -> str:
    """`folder / value` when something by that name is there, else `value` as written."""
    if not value or value.startswith("~") or Path(value).is_absolute():
        return value
    candidate = folder / value
    try:
        return str(candidate) if candidate.exists() else value
    except OSError:  # not a name a file can have (a template's text, say)
        return value
