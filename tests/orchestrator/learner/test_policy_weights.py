"""Syncs run one at a time: in async mode the generation thread admits a new engine (its first load)
while the training thread syncs the others, and the learner publishes one set of buckets at a time."""

import threading
import time

from orchestrator.learner.weights import PolicyWeights
from workers.weights.object_store import ObjectStoreTransport
from workers.weights.transport import SyncReport


class _Learner:
    """A learner group whose sync takes a while and counts how many run at once."""

    def __init__(self):
        self.running, self.most, self.versions = 0, 0, []
        self._count = threading.Lock()

    def sync(self, transport, engines, version, adapter_only=False):
        with self._count:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.2)
        with self._count:
            self.running -= 1
        self.versions.append((sorted(engines), version))
        return SyncReport(version, "c0ffee", 0, 0.2, {})


def test_a_new_engines_first_load_waits_for_the_sync_under_way():
    learner = _Learner()
    weights = PolicyWeights(learner, transport=ObjectStoreTransport(timeout_s=1, bucket_bytes=1 << 20), version=4)
    training = threading.Thread(target=weights.sync, args=({0: "engine 0", 1: "engine 1"},))
    training.start()
    time.sleep(0.05)  # the training thread's sync is under way
    weights.load_into(2, "engine 2")  # the generation thread admits a replacement
    training.join()
    assert learner.most == 1
    assert learner.versions == [([0, 1], 4), ([2], 4)]
