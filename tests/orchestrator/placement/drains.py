"""What the drain and node-loss tests share: where an actor runs on a `ray.cluster_utils.Cluster`, Ray's
own `ray drain-node`, as a cloud's preemption notice reaches a node through Ray's autoscaler, and a node
taken away as a machine is."""

import os
import shutil
import subprocess
import sys
from pathlib import Path


def actor_node(cluster, class_name: str) -> str:
    """The node (hex id) of the one live actor of `class_name`."""
    actors = [a for a in cluster.global_state.actor_table(None).values() if a["ActorClassName"] == class_name]
    (alive,) = [a for a in actors if a["State"] == "ALIVE"]
    return alive["Address"]["NodeID"]


def drain(cluster, node_id: str, deadline_s: int) -> None:
    """`ray drain-node` for a preemption with `deadline_s` left; the node keeps running until killed."""
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    subprocess.run(
        [ray_cli, "drain-node", "--address", cluster.address, "--node-id", node_id, "--reason",
         "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot preemption notice",
         f"--deadline-remaining-seconds={deadline_s}"],
        check=True, timeout=60, env={**os.environ, "RAY_ADDRESS": cluster.address},
    )  # fmt: skip


def node_processes(node) -> list:
    """The node's raylet and everything it started: workers and their vLLM EngineCore processes."""
    import psutil

    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    return [raylet, *raylet.children(recursive=True)]


def cmdline(process) -> str:
    import psutil

    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def take_node_away(cluster, node, processes: list | None = None, mapped_before: set[str] = frozenset()) -> list[str]:
    """Kill `node` as a machine that goes (SIGKILL to its raylet and Ray's processes on it) and return the
    command lines of its `processes` (default: `node_processes(node)` now) that were still running 30 s
    later, killed then. vLLM's processes outlive their raylet and actor unless the engine's reaper
    (workers/rollout/reaper.py) ends them. What they mapped in /dev/shm is removed too: a machine takes
    its /dev/shm along, but these nodes share this one's; so is what its processes mapped earlier
    (`mapped_before`: an engine drained and stopped before the node went, whose clean-up the node's end
    may have cut short)."""
    import psutil

    from workers.rollout.shared_memory import mapped_by, remove_leftovers

    processes = node_processes(node) if processes is None else processes
    shared = mapped_by(p.pid for p in processes) | set(mapped_before)
    cluster.remove_node(node, allow_graceful=False)
    _, orphans = psutil.wait_procs(processes, timeout=30)
    for process in orphans:
        process.kill()
    remove_leftovers(shared)
    return [cmdline(p) for p in orphans]
