"""Results frozen out of the cycle collector are still freed when dropped, and only every N results."""

import gc
import weakref

from orchestrator.rollout.collector import ResultFreezer


class _Result:
    pass


def test_results_are_frozen_every_n_and_still_freed_when_dropped():
    result = _Result()
    alive = weakref.ref(result)
    freezer, before = ResultFreezer(every=2), gc.get_freeze_count()
    try:
        freezer.added()
        assert gc.get_freeze_count() == before
        freezer.added()
        assert gc.get_freeze_count() > before  # the collector no longer walks what the driver holds
        del result
        assert alive() is None  # reference counting frees it: nothing waits for a collection
    finally:
        gc.unfreeze()
