"""Import the Python functions a config names: reward functions and tools.

A spec is `path/to/file.py:name`, `package.module:name` or `builtin:NAME`. Specs are resolved on
the driver before anything starts (so a typo fails at once) and again in the process that calls
them (a Ray task or the tools' host actor), possibly on another node.

A file a spec names is read once per process, and the driver's copy travels with the work
(`UserFile`, `ship`): the process that runs a function loads the text the driver read, not whatever
its own node holds at that path (nothing, on another machine, or another version). So the code that
runs everywhere is the code the driver checked, as it was when the run started. Only the named file
travels: a module it imports must be installed on every node (a helper beside it is not shipped;
keep helpers in the same file). `package.module:name` and built-in specs are imported where they
run, from the packages installed there. A process given the driver's files (`files`) runs only those:
a file spec among them is refused, never read from that node's disk.

A file loads as a module would: registered in `sys.modules` under a name of its own (`user_<stem>_<hash>`)
before its code runs, so that what looks its module up (a `@dataclass` under `from __future__ import
annotations`, pydantic, `typing.get_type_hints`) finds it. Its functions and classes are still pickled
by value, as those of an unregistered module would be: no other process could import that name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.abc
import importlib.util
import linecache
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

from orchestrator.contracts.errors import UserError


@dataclasses.dataclass(frozen=True)
class UserFile:
    """A user's .py file as the driver read it: what every process that runs its functions loads."""

    path: str  # as the spec names it: how it is looked up, and the module's __file__ (for messages)
    source: str
    sha256: str  # of the file's bytes: which version this is


def resolve(spec: str, key: str, builtins: dict[str, str], files: Mapping[str, UserFile] | None = None) -> Callable:
    """The function `spec` names; errors name the config `key`, the spec and what went wrong.
    `files` (by path): the driver's copies (`ship`); a file not among them is read here."""
    name = spec.removeprefix("builtin:")
    if spec.startswith("builtin:") and name not in builtins:
        raise UserError(f"{key}: unknown built-in {spec!r} (built-ins: {', '.join('builtin:' + k for k in builtins)})")
    target = builtins[name] if spec.startswith("builtin:") else spec
    source, sep, attribute = target.rpartition(":")
    if not sep or not source or not attribute:
        raise UserError(f"{key}: {spec!r} is not 'file.py:name', 'module:name' or 'builtin:NAME'")
    try:
        if source.endswith(".py"):
            module = _load(read(source, key) if files is None else _shipped(files, source, key))
        else:
            module = importlib.import_module(source)
    except UserError:
        raise
    except Exception as error:  # the user's module failed to import: say which and why
        hint = ""
        if isinstance(error, ModuleNotFoundError) and source.endswith(".py"):
            hint = (
                f" (only {Path(source).name} itself is sent to the processes that run it: a module it imports must be "
                "installed on every node; keep helpers in the same file)"
            )
        raise UserError(f"{key}: cannot import {source!r} for {spec!r}: {type(error).__name__}: {error}{hint}") from None
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise UserError(f"{key}: {source!r} has no function {attribute!r} (from {spec!r})")
    return fn


def ship(specs: Mapping[str, str]) -> dict[str, UserFile]:
    """The files that `specs` ({spec: the config key that names it}) name, by path, as this process
    read them first: on the driver, when the run was checked. Module and built-in specs name none."""
    files = {}
    for spec, key in specs.items():
        source = spec.rpartition(":")[0]
        if not spec.startswith("builtin:") and source.endswith(".py"):
            files[source] = read(source, key)
    return files


def _shipped(files: Mapping[str, UserFile], path: str, key: str) -> UserFile:
    if path not in files:
        raise UserError(
            f"{key}: {path} was not sent with the run (the driver sends each file a spec names as it read it, and a "
            "process runs only those): name it in the run's config"
        )
    return files[path]


_read: dict[str, UserFile] = {}  # per process: each file as first read (a file edited later is not read again)


def read(path: str, key: str) -> UserFile:
    """`path` as this process first read it; errors name the config `key`."""
    if path not in _read:
        file = Path(path)
        if not file.is_file():
            raise UserError(f"{key}: file {path} does not exist")
        data = file.read_bytes()
        try:
            source = importlib.util.decode_source(data)  # as Python reads a file: its coding line, any newlines
        except (SyntaxError, UnicodeDecodeError) as error:
            raise UserError(f"{key}: {path} is not Python source: {error}") from None
        _read[path] = UserFile(path, source, hashlib.sha256(data).hexdigest())
    return _read[path]


_modules: dict[tuple[str, str], ModuleType] = {}  # per process: a file's functions share one module (its globals, caches)


def _load(file: UserFile) -> ModuleType:
    if (file.path, file.sha256) not in _modules:
        loader = _FromSource(file)
        name = f"user_{Path(file.path).stem}_{file.sha256[:8]}"
        module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, file.path, loader=loader))
        # Tracebacks and `inspect` read lines through linecache, which would read this node's file (another
        # version, or none); an entry without a modification time is kept as given.
        linecache.cache[file.path] = (len(file.source), None, file.source.splitlines(keepends=True), file.path)
        sys.modules[name] = module
        _pickle_by_value(module)
        try:
            loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        _modules[(file.path, file.sha256)] = module
    return _modules[(file.path, file.sha256)]


def _pickle_by_value(module: ModuleType) -> None:
    """Ray pickles a function or class of a module in `sys.modules` by reference (module and name), which
    a process without that module could not import back; a module registered with its pickler's public
    `register_pickle_by_value` is pickled by value instead."""
    try:
        from ray import cloudpickle
    except ImportError:  # no Ray in this process: nothing pickles for it
        return
    cloudpickle.register_pickle_by_value(module)


class _FromSource(importlib.abc.InspectLoader):
    """Loads a module from a `UserFile`'s text, never from this node's disk."""

    def __init__(self, file: UserFile):
        self.file = file

    def get_source(self, fullname: str) -> str:
        return self.file.source

    def get_code(self, fullname: str):
        # dont_inherit: this module's own `from __future__` imports must not apply to the user's code
        return compile(self.file.source, self.file.path, "exec", dont_inherit=True)
