"""Async mode's generation thread: batches generated ahead in order, calls that go before the batches
still waiting, and nothing left running or generated for nothing when the run stops or rewinds."""

import threading

import pytest

from orchestrator.training.prefetch import Prefetcher


class _Generator:
    """Records what the generation thread ran, in order; `gate` holds the first batch until set."""

    def __init__(self):
        self.ran = []
        self.gate = threading.Event()
        self.started = threading.Event()

    def __call__(self, requests):
        self.started.set()
        if not self.ran:
            self.gate.wait(timeout=10)
        self.ran.append(tuple(requests))
        return f"batch {requests[0]}"


def test_batches_come_back_in_order_and_a_call_goes_before_those_waiting():
    generate = _Generator()
    prefetch = Prefetcher(generate)
    for first in (0, 2, 4):
        prefetch.submit([first, first + 1])
    assert prefetch.batches_ahead == 3 and prefetch.groups_ahead == 6
    generate.started.wait(timeout=10)
    threading.Timer(0.3, generate.gate.set).start()  # batch 0 is generating when the call comes
    assert prefetch.call(lambda: list(generate.ran)) == [(0, 1)], "the call waited for the batches still waiting"
    assert prefetch.take() == ([0, 1], "batch 0")
    assert prefetch.take() == ([2, 3], "batch 2")
    assert prefetch.groups_ahead == 2 and prefetch.running
    assert prefetch.take() == ([4, 5], "batch 4")
    assert not prefetch.running and prefetch.groups_ahead == 0
    prefetch.shutdown()


def test_discard_drops_the_batches_waiting_and_waits_for_the_one_generating():
    generate = _Generator()
    prefetch = Prefetcher(generate)
    prefetch.submit([0])
    prefetch.submit([1])
    prefetch.submit([2])
    generate.started.wait(timeout=10)
    threading.Timer(0.2, generate.gate.set).start()
    prefetch.discard()
    assert generate.ran == [(0,)]
    assert not prefetch.running and prefetch.groups_ahead == 0
    prefetch.submit([7])  # the stream rewound: generated from there again
    assert prefetch.take() == ([7], "batch 7")
    prefetch.shutdown()


def test_an_error_of_the_batch_generating_reaches_whoever_takes_or_discards_it():
    started, gate = threading.Event(), threading.Event()

    def fail(requests):
        started.set()
        gate.wait(timeout=10)
        raise RuntimeError(f"engines gone while generating {requests}")

    prefetch = Prefetcher(fail)
    prefetch.submit([3])
    gate.set()
    with pytest.raises(RuntimeError, match=r"generating \[3\]"):
        prefetch.take()
    started.clear()
    gate.clear()
    prefetch.submit([4])
    started.wait(timeout=10)
    threading.Timer(0.2, gate.set).start()
    with pytest.raises(RuntimeError, match=r"generating \[4\]"):
        prefetch.discard()
    prefetch.shutdown()


def test_shutdown_finishes_the_batch_generating_and_drops_the_rest():
    generate = _Generator()
    prefetch = Prefetcher(generate)
    prefetch.submit([0])
    prefetch.submit([1])
    generate.started.wait(timeout=10)
    threading.Timer(0.2, generate.gate.set).start()
    prefetch.shutdown()
    assert generate.ran == [(0,)]
    with pytest.raises(RuntimeError, match="stopped"):
        prefetch.call(print)
