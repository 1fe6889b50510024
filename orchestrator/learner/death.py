"""Why the learner died, in one line: out of memory (Ray's memory monitor or the kernel's OOM killer) or other.

Ray reports a dead actor the same way whatever killed it; only Ray's own memory monitor says so
(`Worker exit type: NODE_OUT_OF_MEMORY`). The kernel's OOM killer sends SIGKILL, which Ray sees as
an unexpected exit, so the learner's node is asked for its OOM-kill counters (the kernel's
`/proc/vmstat` and the container's cgroup `memory.events`) before the learner starts and after it
died: a count that went up means the kernel killed a process there for memory.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.contracts.errors import first_line

_COUNTERS = (Path("/proc/vmstat"), Path("/sys/fs/cgroup/memory.events"), Path("/sys/fs/cgroup/memory/memory.oom_control"))


def oom_kills(counters: tuple[Path, ...] = _COUNTERS) -> dict[str, int]:
    """The OOM-kill counters this node exposes, by file (run on the learner's node)."""
    found = {}
    for path in counters:
        try:
            text = path.read_text()
        except OSError:
            continue
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if match:
            found[str(path)] = int(match.group(1))
    return found


def death_cause(error_text: str, before: dict[str, int] | None, after: dict[str, int] | None) -> str:
    """A short phrase: why the learner died, from Ray's error text and the node's OOM counters."""
    if "NODE_OUT_OF_MEMORY" in error_text:
        return "out of memory: Ray's memory monitor killed it"
    if before and after and any(after.get(path, 0) > count for path, count in before.items()):
        grown = next(path for path, count in before.items() if after.get(path, 0) > count)
        return f"out of memory: the kernel's OOM killer killed a process on its node ({grown}: oom_kill went up)"
    if "creation task" in error_text:
        detail = error_text.split("creation task", 1)[1].strip(" ,")
        return f"it failed to start: {first_line(detail, 200)}"
    detail = re.search(r"Worker exit detail: (.*?)(?:\. |$)", error_text)
    said = f"Ray says: {detail.group(1) if detail else first_line(error_text, 200)}"
    if before and after:
        return f"not out of memory (its node's OOM-kill counters did not change); {said}"
    return said
