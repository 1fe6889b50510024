import threading

from orchestrator.training.busy import BusyClock


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_counts_only_the_time_inside_busy_blocks():
    clock = FakeClock()
    busy = BusyClock(clock)
    clock.now = 5.0  # idle before the first block
    with busy.busy():
        clock.now = 7.5
    clock.now = 20.0  # idle after it
    with busy.busy():
        clock.now = 21.0
    assert busy.seconds() == 3.5


def test_a_block_still_running_counts_up_to_now():
    """The step loop reads the clock while the generation thread is inside `generate` (async mode)."""
    clock, entered, leave = FakeClock(), threading.Event(), threading.Event()
    busy = BusyClock(clock)

    def generate():
        with busy.busy():
            entered.set()
            leave.wait()
            clock.now = 10.0

    thread = threading.Thread(target=generate)
    clock.now = 2.0
    thread.start()
    entered.wait()
    clock.now = 6.0
    assert busy.seconds() == 4.0
    leave.set()
    thread.join()
    assert busy.seconds() == 8.0


def test_a_block_that_raises_is_counted():
    clock = FakeClock()
    busy = BusyClock(clock)
    try:
        with busy.busy():
            clock.now = 3.0
            raise RuntimeError("engine died")
    except RuntimeError:
        pass
    assert busy.seconds() == 3.0
