"""The layering a reader can rely on, checked by walking the syntax tree (imports at module level
and inside functions, attribute accesses) of every module of orchestrator/ and workers/:

- the actors (workers/) import nothing of the driver but its contracts (orchestrator/contracts/);
- the contracts import nothing of the project outside themselves, so both sides can depend on them;
- no two modules of the project import each other, directly or through others;
- other libraries' private code is used only inside workers/fences/ (one module per library, each
  checking the version it was read from): elsewhere no module imports an underscore name of trl,
  vllm, transformers or ray, nor reaches `x._name` (or `getattr(x, "_name")`) on anything but
  `self`/`cls` unless the project itself defines `_name`;
- the rollout pool is a front door: nothing outside orchestrator/rollout/ reaches into a pool's
  engines (`pool.engines`, `self.components.pool.engines`: any `.engines` read on a name ending in `pool`);
- failures are told apart by type where a type exists: no module tests whether a text is `in`
  `str(x)`, `repr(x)`, `x.args` or `x.message` (raise a type of your own where a library gives none;
  Ray's causes of an actor's death, which it gives only as text, are read in orchestrator/learner/death.py);
- every function is called by the project itself: none only by tests (a path `train` never takes) or
  by nothing (dead code); library hooks, dispatched entry points and registered validators aside;
- every function reads at once: at most MAX_FUNCTION_LINES lines (from `def` to its last line) and at
  most MAX_NESTING blocks deep (if, for, while, with, try, match; a nested function starts again).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = "orchestrator.contracts"
FENCES = "workers.fences"
FENCED_LIBRARIES = ("trl", "vllm", "transformers", "ray")
# Underscore names that are public API: a namedtuple's methods and fields.
MAX_FUNCTION_LINES = 60
MAX_NESTING = 4
NESTING_BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar, ast.Match)
PUBLIC_UNDERSCORE_NAMES = {"_asdict", "_field_defaults", "_fields", "_make", "_replace"}


def project_modules(root: Path, packages=("orchestrator", "workers")) -> dict[str, Path]:
    modules = {}
    for package in packages:
        for file in sorted((root / package).rglob("*.py")):
            parts = list(file.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = file
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from a import b` counts as a.b when b is a module)."""
    graph = {}
    for name, file in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if module.startswith("workers") and target.startswith("orchestrator") and not _in_contracts(target):
                problems.append(f"{module} (an actor module) imports the driver's {target}; move what it needs to {CONTRACTS}")
            if _in_contracts(module) and not _in_contracts(target):
                problems.append(f"{module} (a contract) imports {target}; contracts import only contracts")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def private_uses(modules: dict[str, Path], root: Path) -> list[str]:
    """`file:line: what` for every use of another library's private code outside the fences.

    Which library an attribute's object came from is not known statically, so an access `x._name`
    counts unless `x` is `self` or `cls` or the project (outside the fences) defines `_name` itself:
    as a function, class or module-level name, or as an attribute set on `self`/`cls`."""
    outside = {name: file for name, file in modules.items() if not _in(name, FENCES)}
    trees = {name: ast.parse(file.read_text(), str(file)) for name, file in outside.items()}
    ours = set().union(*(_defined_names(tree) for tree in trees.values()))
    problems = []
    for name, tree in trees.items():
        where = outside[name].relative_to(root).as_posix()
        found = [use for node in ast.walk(tree) for use in _private_imports(node) + _private_accesses(node, ours)]
        for line, what in sorted(found):
            problems.append(f"{where}:{line}: {what}; move it to {FENCES.replace('.', '/')}/<library>.py")
    return problems


def pool_reach_ins(modules: dict[str, Path], root: Path) -> list[str]:
    """`file:line: what` for every read of a pool's `.engines` outside orchestrator/rollout/ (a pool is
    whatever is named `pool` or `..._pool`: the project's names for a `RolloutPool`)."""
    problems = []
    for name, file in modules.items():
        if _in(name, "orchestrator.rollout"):
            continue
        tree = ast.parse(file.read_text(), str(file))
        reads = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute)]
        for node in sorted(reads, key=lambda node: (node.lineno, node.col_offset)):
            if node.attr == "engines" and _names_a_pool(node.value):
                problems.append(
                    f"{file.relative_to(root).as_posix()}:{node.lineno}: `{ast.unparse(node)}` reaches into the pool's "
                    "engines; go through RolloutPool's own methods (orchestrator/rollout/pool.py)"
                )
    return problems


def _names_a_pool(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "pool" or name.endswith("_pool")


def _private_imports(node: ast.AST) -> list[tuple[int, str]]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        return []
    return [
        (node.lineno, f"imports {name}, a private name of {name.split('.')[0]}")
        for name in names
        if name.split(".")[0] in FENCED_LIBRARIES and any(_is_private(part) for part in name.split(".")[1:])
    ]


def _private_accesses(node: ast.AST, ours: set[str]) -> list[tuple[int, str]]:
    if isinstance(node, ast.Attribute):
        base, attribute, text = node.value, node.attr, ast.unparse(node)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        base, attribute, text = node.args[0], node.args[1].value, ast.unparse(node)
    else:
        return []
    if not _is_private(attribute) or attribute in ours or attribute in PUBLIC_UNDERSCORE_NAMES:
        return []
    if isinstance(base, ast.Name) and base.id in ("self", "cls"):
        return []
    return [(node.lineno, f"`{text}` reaches {attribute}, which the project does not define: another library's private name")]


def _defined_names(tree: ast.Module) -> set[str]:
    """The underscore names a module defines: functions, classes, module-level names, attributes of self/cls."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return {name for name in names if _is_private(name)}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _in_contracts(module: str) -> bool:
    return _in(module, CONTRACTS)


def test_actors_import_only_the_contracts_of_the_driver():
    assert layering_violations(import_graph(project_modules(ROOT))) == []


def test_no_import_cycle():
    assert cycles(import_graph(project_modules(ROOT))) == []


def test_the_checks_catch_a_cycle_and_an_actor_importing_the_driver(tmp_path):
    files = {
        "orchestrator/__init__.py": "",
        "orchestrator/contracts/__init__.py": "",
        "orchestrator/contracts/groups.py": "from orchestrator.rollout import pool\n",
        "orchestrator/rollout/__init__.py": "",
        "orchestrator/rollout/pool.py": "def start():\n    from workers.rollout.actor import Worker\n",
        "workers/__init__.py": "",
        "workers/rollout/__init__.py": "",
        "workers/rollout/actor.py": "from orchestrator.contracts.groups import Group\nfrom orchestrator.rollout.pool import is_dead\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(project_modules(tmp_path))
    assert cycles(graph) == [["orchestrator.contracts.groups", "orchestrator.rollout.pool", "workers.rollout.actor"]]
    assert layering_violations(graph) == [
        "orchestrator.contracts.groups (a contract) imports orchestrator.rollout.pool; contracts import only contracts",
        "workers.rollout.actor (an actor module) imports the driver's orchestrator.rollout.pool; move what it needs to orchestrator.contracts",
    ]


def test_other_libraries_private_code_is_used_only_in_the_fences():
    assert private_uses(project_modules(ROOT), ROOT) == []


def test_the_check_catches_private_code_used_outside_the_fences(tmp_path):
    files = {
        "orchestrator/__init__.py": "",
        "orchestrator/pool.py": (
            "import ray._private.worker\n"
            "from ray._private import services\n"
            "from transformers.models import _internal\n"
            "def drain(engine):\n"
            "    engine._drain()\n"  # the project defines `_drain` (below): ours
            "    return getattr(engine, '_engine_core')\n"
        ),
        "workers/__init__.py": "",
        "workers/engine.py": (
            "class Engine:\n"
            "    def __init__(self, llm):\n"
            "        self._llm = llm\n"
            "    def _drain(self):\n"
            "        self._llm.engine_core._client.pause()\n"
            "        return self.trainer._get_per_token_logps_and_entropies\n"
        ),
        "workers/fences/__init__.py": "",
        "workers/fences/vllm.py": "from vllm.v1 import _internal\ndef pause(llm):\n    llm._client.pause()\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    fence = "; move it to workers/fences/<library>.py"
    assert private_uses(project_modules(tmp_path), tmp_path) == [
        "orchestrator/pool.py:1: imports ray._private.worker, a private name of ray" + fence,
        "orchestrator/pool.py:2: imports ray._private.services, a private name of ray" + fence,
        "orchestrator/pool.py:3: imports transformers.models._internal, a private name of transformers" + fence,
        "orchestrator/pool.py:6: `getattr(engine, '_engine_core')` reaches _engine_core, which the project does not define: "
        "another library's private name" + fence,
        "workers/engine.py:5: `self._llm.engine_core._client` reaches _client, which the project does not define: "
        "another library's private name" + fence,
        "workers/engine.py:6: `self.trainer._get_per_token_logps_and_entropies` reaches _get_per_token_logps_and_entropies, "
        "which the project does not define: another library's private name" + fence,
    ]


def test_nothing_outside_the_rollout_package_reaches_into_a_pools_engines():
    assert pool_reach_ins(project_modules(ROOT), ROOT) == []


def test_the_check_catches_a_reach_into_the_pool(tmp_path):
    files = {
        "orchestrator/__init__.py": "",
        "orchestrator/rollout/__init__.py": "",
        "orchestrator/rollout/pool.py": "def size(pool):\n    return len(pool.engines.actors)\n",  # its own package
        "orchestrator/training/__init__.py": "",
        "orchestrator/training/loop.py": (
            "def step(self, config):\n"
            "    self.components.pool.engines.resize(config.rollout.engines)\n"  # the config's field is no pool
            "    return rollout_pool.engines\n"
        ),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    door = "reaches into the pool's engines; go through RolloutPool's own methods (orchestrator/rollout/pool.py)"
    assert pool_reach_ins(project_modules(tmp_path), tmp_path) == [
        f"orchestrator/training/loop.py:2: `self.components.pool.engines` {door}",
        f"orchestrator/training/loop.py:3: `rollout_pool.engines` {door}",
    ]


def long_or_deep_functions(modules: dict[str, Path], root: Path) -> list[str]:
    """Functions over MAX_FUNCTION_LINES lines or nested deeper than MAX_NESTING, as `file:line name: why`."""
    found = []
    for path in modules.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines, depth = node.end_lineno - node.lineno + 1, _nesting(node)
            where = f"{path.relative_to(root)}:{node.lineno} {node.name}"
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{where}: {lines} lines (at most {MAX_FUNCTION_LINES})")
            if depth > MAX_NESTING:
                found.append(f"{where}: nested {depth} blocks deep (at most {MAX_NESTING})")
    return sorted(found)


def _nesting(node: ast.AST, depth: int = 0) -> int:
    deepest = depth
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue  # measured on its own
        deepest = max(deepest, _nesting(child, depth + isinstance(child, NESTING_BLOCKS)))
    return deepest


def test_every_function_is_short_and_shallow():
    assert long_or_deep_functions(project_modules(ROOT), ROOT) == []


def test_the_check_catches_a_long_function_and_a_deep_one(tmp_path):
    deep = "def deep(x):\n" + "".join("    " * (level + 1) + "if x:\n" for level in range(5)) + "    " * 6 + "return x\n"
    long = "def long():\n" + "    x = 1\n" * 60 + "    return x\n"
    short = "def short(x):\n    def inner():\n        if x:\n            return x\n    return inner\n"
    (tmp_path / "orchestrator").mkdir()
    (tmp_path / "orchestrator" / "__init__.py").write_text("")
    (tmp_path / "orchestrator" / "code.py").write_text(deep + long + short)
    assert long_or_deep_functions(project_modules(tmp_path), tmp_path) == [
        "orchestrator/code.py:1 deep: nested 5 blocks deep (at most 4)",
        "orchestrator/code.py:8 long: 62 lines (at most 60)",
    ]


def message_matches(modules: dict[str, Path], root: Path) -> list[str]:
    """`"text" in str(x)` (or repr(x), x.args, x.message): recognising something, an error mostly, by its words."""
    found = []
    for path in modules.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
                continue
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and _is_message(right):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: matches {ast.unparse(node)!r}: tell it by type")
    return sorted(found)


def _is_message(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr"):
        return True
    return isinstance(node, ast.Attribute) and node.attr in ("args", "message")


def test_no_failure_is_recognised_by_its_message():
    assert message_matches(project_modules(ROOT), ROOT) == []


def test_the_check_catches_a_message_match(tmp_path):
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "__init__.py").write_text("")
    (tmp_path / "workers" / "code.py").write_text(
        "def timed_out(error):\n"
        "    return 'Timed out waiting' in str(error) or 'gone' not in error.args\n"
        "def fine(names):\n"
        "    return 'a' in names\n"
    )
    assert message_matches(project_modules(tmp_path), tmp_path) == [
        "workers/code.py:2: matches \"'Timed out waiting' in str(error)\": tell it by type",
        "workers/code.py:2: matches \"'gone' not in error.args\": tell it by type",
    ]


# Called by other libraries, not by name in the project: torch's nn.Module, importlib's loader protocol,
# transformers' TrainerCallback, vLLM's WeightTransferEngine (workers/weights/gloo.py).
LIBRARY_HOOKS = {"forward", "get_source", "get_code", "on_step_end", "init_transfer_engine", "receive_weights", "capture_signals"}
# The commands' entry points, called as getattr(module, f"run_{command}") (orchestrator/__main__.py).
DISPATCHED_PREFIX = "run_"


def unused_functions(modules: dict[str, Path], root: Path, tests: Path) -> list[str]:
    """Functions and methods of the project that nothing in it calls: called only by tests (a path
    `train` does not take) or by nothing at all. A name counts as called where the project's code
    names it anywhere: a call, an attribute, an import, or a word in a string ('module:function')."""
    used = _names_used(modules.values())
    tested = _names_used(tests.rglob("*.py"))
    found = []
    for path in modules.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or _exempt(node) or node.name in used:
                continue
            who = "only by tests" if node.name in tested else "by nothing"
            found.append(f"{path.relative_to(root)}:{node.lineno}: {node.name} is called {who}")
    return sorted(found)


def _exempt(node: ast.FunctionDef) -> bool:
    """Dunders, library hooks, dispatched entry points, and functions a decorator call registers
    (pydantic's `@model_validator(...)`: the library calls them)."""
    name = node.name
    registered = any(isinstance(decorator, ast.Call) for decorator in node.decorator_list)
    dunder = name.startswith("__") and name.endswith("__")
    return dunder or registered or name in LIBRARY_HOOKS or name.startswith(DISPATCHED_PREFIX)


def _names_used(files) -> set[str]:
    names = set()
    for file in files:
        for node in ast.walk(ast.parse(Path(file).read_text())):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add(node.name.rsplit(".", 1)[-1])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.update(re.findall(r"[A-Za-z_]\w*", node.value))
    return names


def test_no_function_is_called_only_by_tests():
    assert unused_functions(project_modules(ROOT), ROOT, ROOT / "tests") == []


def test_the_check_catches_a_function_only_tests_call(tmp_path):
    (tmp_path / "orchestrator").mkdir()
    (tmp_path / "orchestrator" / "__init__.py").write_text("")
    (tmp_path / "orchestrator" / "code.py").write_text(
        "class Pool:\n"
        "    def generate(self):\n"
        "        return self.size()\n"
        "    def size(self):\n"
        "        return 1\n"
        "    def node_ids(self):\n"
        "        return []\n"
        "def forgotten():\n"
        "    return 0\n"
        "@validator('x')\n"
        "def _registered():\n"
        "    return 0\n"
        "ENTRY = 'orchestrator.code:generate'\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_code.py").write_text("def test_it(pool):\n    assert pool.node_ids() == []\n")
    assert unused_functions(project_modules(tmp_path), tmp_path, tmp_path / "tests") == [
        "orchestrator/code.py:6: node_ids is called only by tests",
        "orchestrator/code.py:8: forgotten is called by nothing",
    ]
