"""Build a config from a YAML file plus `key=value` / `--key value` overrides (values parsed as YAML,
dotted keys for sections: `rollout.engines=2`). Every error names the key and the source. Relative
paths in the file are read from the file's folder (relative_paths.py)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.config.base import ConfigError, explain
from orchestrator.config.relative_paths import from_config_folder


def parse_overrides(items: list[str]) -> dict:
    """['a.b=1', '--c', 'x', '--d=2'] -> {'a': {'b': 1}, 'c': 'x', 'd': 2}."""
    pairs, index = [], 0
    while index < len(items):
        item = items[index]
        if item.startswith("--"):
            item = item[2:]
            if "=" not in item:
                if index + 1 >= len(items):
                    raise ConfigError(f"override --{item} has no value (expected --{item} VALUE or {item}=VALUE)")
                index += 1
                item = f"{item}={items[index]}"
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as error:
            raise ConfigError(f"override {key}: cannot parse {raw!r} as YAML ({error})") from None
        pairs.append((key.replace("-", "_"), value))
        index += 1
    tree: dict = {}
    for key, value in pairs:
        node = tree
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key}: {parent} is not a section")
        node[leaf] = value
    return tree


def read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw.decode("utf-8")) or {}
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not valid UTF-8 (expected a UTF-8 YAML file)") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML ({getattr(error, 'problem', error)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level")
    return data


def merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(model: type[BaseModel], path: Path, overrides: list[str]):
    """`model` from the YAML file at `path` (its relative paths read from its folder) plus `overrides`
    (relative paths from the current folder)."""
    data = merge(from_config_folder(read_yaml(path), model, path.parent), parse_overrides(overrides))
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"invalid config ({path} + overrides):\n{explain(error, model)}") from None
