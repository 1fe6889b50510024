"""The layering a reader can rely on, checked by walking every import (module-level and inside
functions) of orchestrator/ and workers/:

- the actors (workers/) import nothing of the driver but its contracts (orchestrator/contracts/);
- the contracts import nothing of the project outside themselves, so both sides can depend on them;
- no two modules of the project import each other, directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = "orchestrator.contracts"


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


def _in_contracts(module: str) -> bool:
    return module == CONTRACTS or module.startswith(CONTRACTS + ".")


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
