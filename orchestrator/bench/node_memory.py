"""Where a run's memory goes on this node: sampled a few times a second, split by component.

    with NodeMemory() as memory:      # a thread samples while the run goes on
        run()
    memory.report()                   # the node's peak, what held it, and each component's own peak

The node figure is what the kernel counts as used (total - available: page cache left out). Each
process's private memory (`RssAnon`) is counted for its component: the learner actor, the engine
actors, their vLLM engine processes, the driver (this process) and the rest of Ray (GCS, raylet,
idle workers, reward tasks). Memory several processes map (Ray's object store, the engines' weight
staging regions) is counted once, as `shared memory` (the kernel's `Shmem`). What is left (kernel,
page tables, other programs) is `other`.
"""

from __future__ import annotations

import os
import threading
import time

COMPONENTS = ("learner", "engine actors", "vLLM engine processes", "driver", "Ray", "shared memory", "other")
SAMPLE_S = 0.1


class NodeMemory:
    def __init__(self, interval_s: float = SAMPLE_S):
        self.interval_s = interval_s
        _wait_for_children_to_exit()  # a run before this one may still be letting go
        self.baseline = _used()  # before the run: what other programs and this process held already
        self.samples: list[tuple[float, int, dict[str, int]]] = []  # (seconds since start, used, by component)
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, name="node-memory", daemon=True)

    def __enter__(self) -> NodeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> dict:
        """The node's peak (GB), the breakdown at that moment, and each component's own peak."""
        at, used, parts = max(self.samples, key=lambda sample: sample[1])
        own = {name: max(sample[2][name] for sample in self.samples) for name in COMPONENTS}
        gb = 1e-9
        return {
            "node_gb": used * gb,
            "baseline_gb": self.baseline * gb,
            "at_s": at,
            "at_peak_gb": {name: parts[name] * gb for name in COMPONENTS},
            "own_peak_gb": {name: own[name] * gb for name in COMPONENTS},
            "samples": len(self.samples),
        }

    def _sample_until_stopped(self) -> None:
        driver = os.getpid()
        while not self._stop.is_set():
            used = _used()
            parts = _by_component(driver)
            parts["shared memory"] = _meminfo("Shmem")
            parts["other"] = max(0, used - sum(parts.values()))
            self.samples.append((time.monotonic() - self._start, used, parts))
            self._stop.wait(self.interval_s)


def _by_component(driver: int) -> dict[str, int]:
    """Private memory of the driver and of each of its descendant processes, by component."""
    import psutil

    parts = dict.fromkeys(COMPONENTS, 0)
    seen = {}  # pid -> (title, parent pid, private bytes)
    try:
        root = psutil.Process(driver)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return parts
    for process in processes:
        try:
            seen[process.pid] = (" ".join(process.cmdline()[:1]), process.ppid(), _status_kb(process.pid, "RssAnon") << 10)
        except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError, ProcessLookupError):
            continue
    for pid, (title, _, private) in seen.items():
        parts[_kind(pid, title, seen, driver)] += private
    return parts


def _kind(pid: int, title: str, seen: dict, driver: int) -> str:
    if pid == driver:
        return "driver"
    if title.startswith("ray::Learner"):
        return "learner"
    if title.startswith("ray::RolloutWorker"):
        return "engine actors"
    parent = seen[pid][1]
    while parent in seen and parent != driver:  # vLLM's engine process is a child of an engine actor
        if seen[parent][0].startswith("ray::RolloutWorker"):
            return "vLLM engine processes"
        parent = seen[parent][1]
    return "Ray"


def _wait_for_children_to_exit(timeout_s: float = 60.0) -> None:
    """Until no process this one started is left and the node's memory has stopped falling."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while psutil.Process().children(recursive=True) and time.monotonic() < deadline:
        time.sleep(0.5)
    before = _used()
    while time.monotonic() < deadline:
        time.sleep(2.0)
        now = _used()
        if now > before - (50 << 20):
            return
        before = now


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _meminfo(field: str) -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    return 0


def _used() -> int:
    return _meminfo("MemTotal") - _meminfo("MemAvailable")
