"""Import the Python functions a config names: reward functions and tools.

A spec is `path/to/file.py:name`, `package.module:name` or `builtin:NAME`. Specs are resolved on
the driver before anything starts (so a typo fails at once) and again in the process that calls
them (a Ray task or the tools' host actor), which imports each file once.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path

from orchestrator.contracts.errors import UserError


def resolve(spec: str, key: str, builtins: dict[str, str]) -> Callable:
    """The function `spec` names; errors name the config `key`, the spec and what went wrong."""
    name = spec.removeprefix("builtin:")
    if spec.startswith("builtin:") and name not in builtins:
        raise UserError(f"{key}: unknown built-in {spec!r} (built-ins: {', '.join('builtin:' + k for k in builtins)})")
    target = builtins[name] if spec.startswith("builtin:") else spec
    source, sep, attribute = target.rpartition(":")
    if not sep or not source or not attribute:
        raise UserError(f"{key}: {spec!r} is not 'file.py:name', 'module:name' or 'builtin:NAME'")
    try:
        module = _load_file(source, key) if source.endswith(".py") else importlib.import_module(source)
    except UserError:
        raise
    except Exception as error:  # the user's module failed to import: say which and why
        raise UserError(f"{key}: cannot import {source!r} for {spec!r}: {type(error).__name__}: {error}") from None
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise UserError(f"{key}: {source!r} has no function {attribute!r} (from {spec!r})")
    return fn


_loaded_files: dict[Path, object] = {}  # per process: a file's functions share one module (its globals, caches)


def _load_file(path: str, key: str):
    file = Path(path)
    if not file.is_file():
        raise UserError(f"{key}: file {path} does not exist")
    if file.resolve() in _loaded_files:
        return _loaded_files[file.resolve()]
    module_spec = importlib.util.spec_from_file_location(f"user_{file.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    _loaded_files[file.resolve()] = module
    return module
