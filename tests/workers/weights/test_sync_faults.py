"""A sync always ends by `weight_sync.timeout_s`: an engine that fails its load, dies or never answers
is reported dead (the pool replaces it) and the others are synced; a learner that never answers
raises `LearnerSyncTimeout` (it is restarted). Real Ray, stand-ins for the actors' handles, so the
NCCL path runs here too."""

import time

import pytest

TIMEOUT_S, MARGIN_S = 2.0, 1.5


class _Method:
    def __init__(self, behaviour):
        self.behaviour = behaviour

    def remote(self, *args):
        return self.behaviour(*args)


class _Handle:
    """An actor handle whose methods return ObjectRefs made by the given behaviours."""

    def __init__(self, **behaviours):
        for name, behaviour in behaviours.items():
            setattr(self, name, _Method(behaviour))


class _Stage:
    """One async actor that plays every failing or hanging call (started once: no cold worker start
    inside a timed sync)."""

    async def fail(self, error):
        raise error

    async def hang(self):
        import asyncio

        await asyncio.sleep(3600)

    async def take(self, bucket):
        """An engine's feed: it fails if its bucket (an ObjectRef argument) failed."""
        return None

    async def take_after(self, delay_s, bucket):
        import asyncio

        await asyncio.sleep(delay_s)


@pytest.fixture(scope="module")
def faults(ray_session):
    """Behaviours: `answers(value)`, `raises(error)`, `hangs()`."""
    import ray

    stage = ray.remote(_Stage).options(num_cpus=0).remote()
    ray.get(stage.__ray_ready__.remote())

    class Faults:
        @staticmethod
        def answers(value):
            return lambda *args: ray.put(value(*args) if callable(value) else value)

        @staticmethod
        def raises(error):
            return lambda *args: stage.fail.remote(error)

        @staticmethod
        def hangs():
            return lambda *args: stage.hang.remote()

        @staticmethod
        def takes():
            return lambda version, index, bucket: stage.take.remote(bucket)

        @staticmethod
        def takes_after(delay_s):
            return lambda version, index, bucket: stage.take_after.remote(delay_s, bucket)

    yield Faults
    ray.kill(stage)


def _learner(faults, **overrides):
    behaviours = {
        "publish_weights": faults.answers(([], 1234, 0)),
        "published_checksum": faults.answers("c0ffee"),
        "nccl_endpoint": faults.answers(("127.0.0.1", 29500)),
        "nccl_open": faults.answers(None),
        "weight_metadata": faults.answers({"names": ["w"], "dtype_names": ["float32"], "shapes": [[4]]}),
        "nccl_send": faults.answers(("unverified", 1234)),
    }
    return _Handle(**{**behaviours, **overrides})


def _engine(faults, **overrides):
    from workers.weights.nccl import UNVERIFIED

    behaviours = {
        "load_weights": faults.answers(lambda headers, version, timeout_s: (version, "c0ffee")),
        "init_nccl": faults.answers(None),
        "receive_nccl": faults.answers(lambda metadata, version: (version, UNVERIFIED)),
        "feed_weights": faults.answers(None),
        "abort_weights": faults.answers(None),
    }
    return _Handle(**{**behaviours, **overrides})


def _load_failed():
    from orchestrator.contracts.engine_death import WeightLoadFailedError

    return WeightLoadFailedError("engine 1: loading policy version 3 failed part-way (KeyError: 'lm_head.bias')")


def _timed(fn):
    start = time.monotonic()
    result = fn()
    return result, time.monotonic() - start


def test_an_engine_whose_load_fails_is_reported_dead_and_the_others_are_synced(faults):
    from workers.weights.object_store import ObjectStoreTransport

    engines = {0: _engine(faults), 1: _engine(faults, load_weights=faults.raises(_load_failed()))}
    report = ObjectStoreTransport(TIMEOUT_S, 1 << 20).sync(_learner(faults), engines, version=3)
    assert report.version == 3 and report.checksum == "c0ffee"
    assert list(report.dead) == [1] and "failed part-way" in str(report.dead[1])


def test_an_engine_that_never_answers_is_reported_dead_at_the_deadline(faults):
    from orchestrator.contracts.engine_death import reason
    from workers.weights.object_store import ObjectStoreTransport

    engines = {0: _engine(faults), 1: _engine(faults, load_weights=faults.hangs())}
    report, took = _timed(lambda: ObjectStoreTransport(TIMEOUT_S, 1 << 20).sync(_learner(faults), engines, version=3))
    assert TIMEOUT_S <= took < TIMEOUT_S + MARGIN_S
    assert list(report.dead) == [1]
    assert reason(report.dead[1]) == (
        f"TimeoutError: engine 1: weight sync to version 3 did not finish within weight_sync.timeout_s={TIMEOUT_S}s"
    )


STREAMED = [[["w", "float32", [1], 0, 4]]] * 3  # the headers of three one-tensor buckets


def _streaming_learner(faults, **overrides):
    behaviours = {"publish_weights": faults.answers((STREAMED, 12, 0)), "weight_bucket": faults.answers("a bucket")}
    return _learner(faults, **{**behaviours, **overrides})


def test_an_engine_that_stops_taking_buckets_is_late_and_the_others_are_synced(faults):
    from workers.weights.object_store import ObjectStoreTransport

    engines = {0: _engine(faults, feed_weights=faults.takes()), 1: _engine(faults, feed_weights=faults.hangs())}
    report, took = _timed(lambda: ObjectStoreTransport(TIMEOUT_S, 1 << 20).sync(_streaming_learner(faults), engines, 3))
    assert TIMEOUT_S <= took < TIMEOUT_S + MARGIN_S
    assert report.checksum == "c0ffee" and list(report.dead) == [1]
    assert "(0 of 3 buckets taken)" in str(report.dead[1])


def test_a_learner_that_fails_mid_stream_raises_and_stops_every_engines_load(faults):
    import ray

    from workers.weights.object_store import ObjectStoreTransport

    aborted = []
    abort = faults.answers(lambda version: aborted.append(version))
    engines = {e: _engine(faults, feed_weights=faults.takes(), abort_weights=abort) for e in (0, 1)}
    learner = _streaming_learner(faults, weight_bucket=faults.raises(RuntimeError("out of memory")))
    with pytest.raises(ray.exceptions.RayTaskError, match="out of memory"):
        ObjectStoreTransport(TIMEOUT_S, 1 << 20).sync(learner, engines, version=3)
    assert aborted == [3, 3]


def test_a_learner_failing_on_a_later_bucket_is_its_failure_not_the_engines(faults):
    """Bucket 1 fails while the engine still copies bucket 0: the learner's error is raised, and the
    engine is not dropped for it."""
    import ray

    from workers.weights.object_store import ObjectStoreTransport

    good, bad = faults.answers("a bucket"), faults.raises(RuntimeError("out of memory casting bucket 1"))
    learner = _streaming_learner(faults, weight_bucket=lambda index: bad(index) if index == 1 else good(index))
    slow, take = faults.takes_after(0.5), faults.takes()
    feed = lambda version, index, bucket: (slow if index == 0 else take)(version, index, bucket)  # noqa: E731
    with pytest.raises(ray.exceptions.RayTaskError, match="out of memory casting bucket 1"):
        ObjectStoreTransport(TIMEOUT_S, 1 << 20).sync(learner, {0: _engine(faults, feed_weights=feed)}, version=3)


def test_a_learner_that_never_answers_raises_learner_sync_timeout(faults):
    from workers.weights.object_store import ObjectStoreTransport
    from workers.weights.transport import LearnerSyncTimeout

    learner = _learner(faults, published_checksum=faults.hangs())
    engines = {0: _engine(faults), 1: _engine(faults, load_weights=faults.hangs())}
    start = time.monotonic()
    waiting = r"did not finish within weight_sync.timeout_s=2.0s: waiting on the learner, engine 1"
    with pytest.raises(LearnerSyncTimeout, match=waiting) as caught:
        ObjectStoreTransport(TIMEOUT_S, 1 << 20).sync(learner, engines, version=3)
    assert time.monotonic() - start < TIMEOUT_S + MARGIN_S
    assert list(caught.value.engines) == [1]  # to replace along with the learner


def test_an_engine_dying_mid_broadcast_leaves_the_learner_stuck_and_the_group_opened_again(faults):
    """NCCL needs every rank: the learner's broadcast never returns once a receiver died."""
    from workers.weights.nccl import NcclTransport
    from workers.weights.transport import LearnerSyncTimeout

    transport = NcclTransport(TIMEOUT_S, 1 << 20)
    engines = {0: _engine(faults), 1: _engine(faults, receive_nccl=faults.raises(_load_failed()))}
    start = time.monotonic()
    with pytest.raises(LearnerSyncTimeout, match="NCCL weight sync to version 3 did not finish") as caught:
        transport.sync(_learner(faults, nccl_send=faults.hangs()), engines, version=3)
    assert time.monotonic() - start < TIMEOUT_S + MARGIN_S
    assert list(caught.value.engines) == [1]

    # A restarted learner opens a new group with the engines left, at its first sync.
    transport.learner_replaced()
    report = transport.sync(_learner(faults), {0: engines[0]}, version=3)
    assert report.version == 3 and not report.dead and report.transport == "nccl"


def test_on_the_nccl_path_a_failed_receiver_is_reported_dead_when_the_learner_finished(faults):
    from workers.weights.nccl import NcclTransport

    transport = NcclTransport(TIMEOUT_S, 1 << 20)
    engines = {
        0: _engine(faults),
        1: _engine(faults, receive_nccl=faults.raises(_load_failed())),
        2: _engine(faults, receive_nccl=faults.hangs()),
    }
    report, took = _timed(lambda: transport.sync(_learner(faults), engines, version=3))
    assert took < TIMEOUT_S + MARGIN_S
    assert sorted(report.dead) == [1, 2] and report.transport == "nccl"
    opened = []
    learner = _learner(faults, nccl_open=faults.answers(lambda *args: opened.append(args)))
    report = transport.sync(learner, {0: engines[0]}, version=4)  # its members changed: a new group
    assert report.version == 4 and not report.dead and report.transport == "nccl" and len(opened) == 1


def test_the_nccl_fallback_shares_the_syncs_deadline(faults):
    from workers.weights.nccl import NcclTransport

    transport = NcclTransport(TIMEOUT_S, 1 << 20)
    engines = {  # engine 1 fails to join the group: the others take the object store, where engine 2 hangs
        0: _engine(faults),
        1: _engine(faults, init_nccl=faults.raises(_load_failed())),
        2: _engine(faults, load_weights=faults.hangs()),
    }
    report, took = _timed(lambda: transport.sync(_learner(faults), engines, version=3))
    assert took < TIMEOUT_S + MARGIN_S and sorted(report.dead) == [1, 2] and report.transport == "object_store"


def test_wrong_weights_stay_an_error_for_the_run(faults):
    from workers.weights.object_store import ObjectStoreTransport
    from workers.weights.transport import LearnerSyncTimeout, WeightSyncError

    engines = {0: _engine(faults, load_weights=faults.answers(lambda headers, version, timeout_s: (version, "badbad")))}
    with pytest.raises(WeightSyncError, match="weight provenance check failed") as caught:
        ObjectStoreTransport(TIMEOUT_S, 1 << 20).sync(_learner(faults), engines, version=3)
    assert not isinstance(caught.value, LearnerSyncTimeout)


class _LearnerGroup:
    """`LearnerGroup.sync` without Ray actors: the transport from one learner handle."""

    def __init__(self, handle):
        self.handle = handle

    def sync(self, transport, engines, version, adapter_only=False):
        return transport.sync(self.handle, engines, version, adapter_only)


def test_a_new_engine_that_fails_its_first_load_is_not_admitted(faults):
    from orchestrator.learner.weights import PolicyWeights
    from workers.weights.object_store import ObjectStoreTransport
    from workers.weights.transport import WeightSyncError

    engine = _engine(faults, load_weights=faults.raises(_load_failed()))
    weights = PolicyWeights(_LearnerGroup(_learner(faults)), ObjectStoreTransport(TIMEOUT_S, 1 << 20), version=3)
    failure = r"engine 5 did not load policy version 3: WeightLoadFailedError: engine 1"
    with pytest.raises(WeightSyncError, match=failure):
        weights.load_into(5, engine)  # what the pool does before an engine serves


def test_engines_admitted_before_the_first_nccl_sync_wait_for_it(faults):
    """On GPU the first sync opens one NCCL group for every engine: none loads on its own before it."""
    from orchestrator.learner.weights import PolicyWeights
    from workers.weights.nccl import NcclTransport

    calls = []
    engine = _engine(
        faults, load_weights=faults.answers(lambda headers, version, timeout_s: calls.append(version) or (version, "c0ffee"))
    )
    weights = PolicyWeights(_LearnerGroup(_learner(faults)), NcclTransport(TIMEOUT_S, 1 << 20), 3, first_sync_together=True)
    weights.load_into(0, engine)
    assert calls == []
    report = weights.sync({0: engine})
    assert report.version == 3 and report.dead == {}
    weights.load_into(1, _engine(faults))  # a later engine joins by the object store as it is admitted


def test_a_rendezvous_an_engine_never_joins_ends_at_the_open_deadline_naming_every_sides_error(faults, caplog):
    """Engine 1 never answers; engine 0 and the learner give up waiting for it in the rendezvous. The
    open ends at its own deadline (a quarter of the sync's, plus a margin), each side's error is said,
    engine 1 is replaced, and the others take the object store in the same sync."""
    import logging

    from workers.weights.nccl import NcclTransport

    timeout_s = 8.0  # ranks wait 2 s, the driver 4 s; the object store has the rest
    waited = "RuntimeError: rank {} of the gloo weight-transfer group did not meet the other ranks within 2s"
    learner = _learner(faults, nccl_open=faults.answers(waited.format(0)))
    engines = {0: _engine(faults, init_nccl=faults.answers(waited.format(1))), 1: _engine(faults, init_nccl=faults.hangs())}
    transport = NcclTransport(timeout_s, 1 << 20, backend="gloo")
    with caplog.at_level(logging.WARNING, logger="orchestrator.weights"):
        report, took = _timed(lambda: transport.sync(learner, engines, version=3))
    assert took < timeout_s / 2 + MARGIN_S
    assert list(report.dead) == [1] and report.transport == "object_store" and report.checksum == "c0ffee"
    said = caplog.text
    assert "opening the gloo weight-transfer group failed" in said
    assert f"engine 0: {waited.format(1)}" in said and f"the learner: {waited.format(0)}" in said
    assert "engine 1: TimeoutError: engine 1: opening the gloo weight-transfer group did not finish within 4s" in said

    # The same engines again: no second wait for a group that could not open for them.
    opened = []
    learner = _learner(faults, nccl_open=faults.answers(lambda *args: opened.append(args)))
    report = transport.sync(learner, {0: _engine(faults), 1: _engine(faults)}, version=4)
    assert opened == [] and report.transport == "object_store" and not report.dead


def test_a_failed_gloo_broadcast_replaces_the_engines_whose_load_failed_and_reloads_the_others(faults):
    """The learner's gloo broadcast fails when a peer dies (it answers no checksum): receivers left
    half-loaded are replaced, and an engine that had received everything takes the weights again
    through the object store, so nothing unverified serves."""
    from workers.weights.nccl import NcclTransport

    transport = NcclTransport(TIMEOUT_S, 1 << 20, backend="gloo")
    reloaded = []
    engines = {
        0: _engine(faults, load_weights=faults.answers(lambda *args: reloaded.append(0) or (args[1], "c0ffee"))),
        1: _engine(faults, receive_nccl=faults.raises(_load_failed())),
    }
    report = transport.sync(_learner(faults, nccl_send=faults.answers((None, 1234))), engines, version=3)
    assert list(report.dead) == [1] and reloaded == [0]
    assert report.transport == "object_store" and report.checksum == "c0ffee"


def test_an_engine_that_rejects_a_gloo_patch_takes_the_dense_weights_through_the_object_store_in_the_same_sync(faults):
    """Delta sync over gloo (workers/weights/delta.py): the patch reaches every member of the group; one
    that rejects it (its copy is not the patch's base, or the checksum after it differs) is sent the
    dense weights through the object store before the sync ends, and counted."""
    from workers.weights.delta import REJECTED, DeltaBook, Manifest
    from workers.weights.nccl import NcclTransport

    transport = NcclTransport(TIMEOUT_S, 1 << 20, dtype="bfloat16", backend="gloo", delta=DeltaBook(50))
    manifest = Manifest(3, 4, ("w",), {"w": (4,)}, "patched", elements=1000, sent=10, nbytes=2000).as_dict()
    metadata = {"names": ["w"], "dtype_names": ["bfloat16"], "shapes": [[4]]}
    learner = _learner(
        faults,
        prepare_delta=faults.answers(lambda dtype, anchor, version: (metadata, version, None if anchor else manifest)),
        publish_delta=faults.answers(lambda bucket_bytes, dtype, anchor, version: ([], 8, version, None)),
        nccl_send=faults.answers(("c0ffee", 1234)),
    )
    dense = []

    def rejects(metadata, version, patch, mirror):
        return (version, "c0ffee") if patch is None else (version - 1, REJECTED + "it holds no weights")

    engines = {
        0: _engine(
            faults, receive_nccl=faults.answers(lambda m, v, patch, mirror: (v, patch["checksum"] if patch else "c0ffee"))
        ),
        1: _engine(
            faults,
            receive_nccl=faults.answers(rejects),
            load_weights=faults.answers(
                lambda headers, version, timeout_s, *delta: dense.append((version, delta)) or (version, "c0ffee")
            ),
        ),
    }
    anchor = transport.sync(learner, engines, version=3)  # the group opens; the first sync is the dense anchor
    patch = transport.sync(learner, engines, version=4)
    assert anchor.delta["density"] == 1.0 and anchor.transport == patch.transport == "gloo"
    assert patch.dead == {} and patch.delta == {"density": 0.01, "dense_resyncs": 1, "model_bytes": 2000}
    assert dense == [(4, (None, True))]  # the dense weights, kept as the engine's copy for the next patches
    assert transport.delta.held == {0: 4, 1: 4} and patch.bytes == 1234 + 8
