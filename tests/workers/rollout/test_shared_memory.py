"""What a killed engine leaves in /dev/shm, and running, is found and removed, and nothing else is:
fake /proc folders and a tmp dir stand in for the node's memory maps, plus one real shared-memory
segment of this process and real `sleep` processes for the engines' processes."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from multiprocessing import shared_memory as mp_shared_memory
from pathlib import Path

from workers.rollout.processes import describe, kill_survivors
from workers.rollout.shared_memory import (
    SHM,
    entries,
    mapped_by,
    mapped_inodes,
    owned_entries,
    process_tree,
    remove_leftovers,
    sweep,
    unmapped_entries,
    write_claim,
)


def _maps_line(path: str, inode: int | None = None) -> str:
    """A maps line for `path`, with the file's own inode unless given (0 for one that is not there)."""
    if inode is None:
        try:
            inode = os.stat(path.removesuffix(" (deleted)")).st_ino
        except FileNotFoundError:
            inode = 0
    return f"7f3a2c000000-7f3a2d000000 rw-s 00000000 00:1a {inode}                       {path}"


def _node(tmp_path: Path, names: list[str], maps: dict[int, list[str]]) -> tuple[Path, Path]:
    """A /dev/shm holding `names` and a /proc whose process `pid` maps `maps[pid]` (paths)."""
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    for name in names:
        (shm / name).write_bytes(b"x")
    for pid, paths in maps.items():
        _set_maps(proc, pid, paths)
    (proc / "self").mkdir(parents=True)  # not a pid: ignored
    return shm, proc


def _set_maps(proc: Path, pid: int, paths: list[str]) -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    lines = [
        "55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1234 /usr/bin/python3.11",
        "7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]",
    ]
    (proc / str(pid) / "maps").write_text("\n".join(lines + [_maps_line(path) for path in paths]) + "\n")


def test_maps_give_the_inodes_of_the_shm_files_they_map_under_any_name():
    maps = "\n".join(
        [
            _maps_line("/dev/shm/psm_394d2870", 11),
            _maps_line("/dev/shm/sem.X5YFtj (deleted)", 12),  # a semaphore, by its creator: named since
            _maps_line("/dev/shm/name with spaces", 13),
            _maps_line("/dev/shmother/psm_1", 14),
            _maps_line("/dev/shm/sub/psm_2", 15),
            _maps_line("/memfd:staging (deleted)", 16),
            "7ffd1000-7ffd2000 rw-p 00000000 00:00 0",
        ]
    )
    assert mapped_inodes(maps, Path("/dev/shm")) == {11, 12, 13}


def test_a_semaphore_held_only_by_its_creator_is_mapped_not_left_over():
    """glibc maps a new semaphore under a temporary name before it names it: its creator's maps never
    show `sem.mp-*`, yet the semaphore is in use and no other engine may remove it."""
    import sys

    before = entries()
    script = (
        "import multiprocessing, time; lock = multiprocessing.get_context('spawn').Lock(); "
        "print(lock._semlock.name, flush=True); time.sleep(60)"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        held = f"sem.{process.stdout.readline().strip().lstrip('/')}"
        assert held in mapped_by([process.pid])
        assert held not in unmapped_entries(before)
    finally:
        process.kill()
        process.wait()


def test_leftovers_are_removed_once_unmapped_and_others_are_kept(tmp_path):
    shm, proc = _node(
        tmp_path,
        ["psm_dead", "psm_shared", "psm_other_engine", "sem.mp-node"],
        {
            7: [f"{tmp_path}/shm/psm_shared"],  # a live process still maps it
            8: [f"{tmp_path}/shm/psm_other_engine"],
        },
    )
    removed = remove_leftovers(["psm_dead", "psm_shared", "psm_gone"], timeout_s=0, proc=proc, shm_dir=shm)
    assert removed == ["psm_dead"]
    assert entries(shm) == {"psm_shared", "psm_other_engine", "sem.mp-node"}


def test_leftovers_still_mapped_by_exiting_processes_are_removed_when_they_exit(tmp_path):
    shm, proc = _node(tmp_path, ["psm_a", "sem.mp-b"], {9: [f"{tmp_path}/shm/psm_a", f"{tmp_path}/shm/sem.mp-b"]})
    exits = threading.Timer(0.3, lambda: (proc / "9" / "maps").unlink())  # the engine's process exits a moment later
    exits.start()
    started = time.monotonic()
    removed = remove_leftovers(["psm_a", "sem.mp-b"], timeout_s=10, poll_s=0.05, proc=proc, shm_dir=shm)
    assert sorted(removed) == ["psm_a", "sem.mp-b"] and entries(shm) == set()
    assert time.monotonic() - started < 5


def test_a_process_that_never_unmaps_is_waited_for_only_until_the_timeout(tmp_path):
    shm, proc = _node(tmp_path, ["psm_a"], {9: [f"{tmp_path}/shm/psm_a"]})
    started = time.monotonic()
    assert remove_leftovers(["psm_a"], timeout_s=0.3, poll_s=0.05, proc=proc, shm_dir=shm) == []
    assert 0.3 <= time.monotonic() - started < 5 and entries(shm) == {"psm_a"}


def test_an_engine_owns_what_its_processes_map_that_was_not_there_before():
    before = entries()
    segment = mp_shared_memory.SharedMemory(create=True, size=4096)  # what vLLM's message queues are
    try:
        owned = owned_entries(process_tree(os.getpid()), before)
        assert segment.name in owned
        assert set(owned).isdisjoint(before)
        assert segment.name not in owned_entries(process_tree(os.getpid()), before | {segment.name})
    finally:
        segment.close()
        segment.unlink()
    assert (SHM / segment.name).exists() is False


def test_a_sweep_ends_what_engines_whose_actor_is_gone_left_running_and_removes_what_they_claimed(tmp_path):
    shm, proc = _node(tmp_path, ["psm_killed", "sem.mp-killed", "psm_alive", "psm_unclaimed"], {})
    claims = tmp_path / "claims"
    gone = subprocess.Popen(["true"])  # a killed engine's actor
    gone.wait()
    survivor = subprocess.Popen(["sleep", "600"])  # its vLLM process, still running (stopped, or reparented)
    actor = subprocess.Popen(["sleep", "600"])  # the actor of an engine that still runs
    try:
        killed = write_claim([(gone.pid, 1), *describe([survivor.pid])], ["psm_killed", "sem.mp-killed"], claims)
        alive = write_claim(describe([actor.pid]), ["psm_alive"], claims)
        assert sorted(sweep(claims, proc, shm)) == ["psm_killed", "sem.mp-killed"]
        assert survivor.poll() is not None, "the killed engine's process still runs"
        assert entries(shm) == {"psm_alive", "psm_unclaimed"}
        assert not killed.exists() and alive.exists() and actor.poll() is None
        actor.kill()
        actor.wait()  # the running engine stops too
        assert sweep(claims, proc, shm) == ["psm_alive"] and not alive.exists()
        assert sweep(tmp_path / "no-claims", proc, shm) == []
    finally:
        for process in (survivor, actor):
            process.kill()
            process.wait()


def test_only_the_same_process_is_killed_not_one_that_took_its_pid(tmp_path):
    process = subprocess.Popen(["sleep", "600"])
    try:
        [(pid, started)] = describe([process.pid])
        assert kill_survivors([(pid, started + 1)]) == [] and process.poll() is None  # another start time
        assert kill_survivors([(pid, started)]) == [pid] and process.poll() is not None
    finally:
        process.kill()
        process.wait()


def test_no_shm_folder_means_no_entries(tmp_path):
    assert entries(tmp_path / "missing") == set()


def test_a_killed_process_semaphores_are_unlinked_by_its_resource_tracker_which_is_spared():
    """vLLM's processes create multiprocessing semaphores (/dev/shm/sem.mp-*) through a resource
    tracker process; killing the tracker with them would leave the semaphores for good."""
    import sys

    from workers.rollout.processes import is_resource_tracker, running

    script = (
        "import multiprocessing, time; lock = multiprocessing.get_context('spawn').Lock(); "
        "print(lock._semlock.name, flush=True); time.sleep(60)"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    entry = Path("/dev/shm") / f"sem.{process.stdout.readline().strip().lstrip('/')}"
    assert entry.exists()
    tree = describe(process_tree(process.pid))
    trackers = [pid for pid, _ in tree if is_resource_tracker(pid)]
    assert trackers, "the spawn context started no resource tracker"
    killed = kill_survivors(tree)
    assert process.pid in killed and not set(trackers) & set(killed)
    deadline = time.monotonic() + 10
    while entry.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not entry.exists()
    spared = describe(trackers)
    while running(spared) and time.monotonic() < deadline:  # and then the tracker exits by itself
        time.sleep(0.05)
    assert not running(spared)


def test_entries_no_process_maps_any_more_are_an_engines_as_well():
    """What Ray leaves when it kills an engine's actor with all of its child processes, the resource
    tracker included: a semaphore nothing maps any more. A segment still mapped is not among them."""
    import signal
    import sys

    before = entries()
    script = (
        "import multiprocessing, time; lock = multiprocessing.get_context('spawn').Lock(); "
        "print(lock._semlock.name, flush=True); time.sleep(60)"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    left = f"sem.{process.stdout.readline().strip().lstrip('/')}"
    for pid in process_tree(process.pid):  # as Ray does: the tracker goes too, so nothing unlinks it
        os.kill(pid, signal.SIGKILL)
    process.wait()
    segment = mp_shared_memory.SharedMemory(create=True, size=4096)  # mapped by this process
    try:
        unmapped = unmapped_entries(before)
        assert left in unmapped and segment.name not in unmapped
        assert left not in unmapped_entries(before | {left})
        assert remove_leftovers([left], timeout_s=0) == [left]  # only its own: other sessions' may be unmapped too
    finally:
        segment.close()
        segment.unlink()
    assert not (SHM / left).exists()
