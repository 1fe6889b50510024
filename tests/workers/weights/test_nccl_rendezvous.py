"""The NCCL group's rendezvous is chosen by rank 0 (the learner), on its own node, not by the driver:
on a multi-node cluster an address picked on the driver's node cannot be bound by the learner
("Cannot assign requested address"). Runs on CPU with stand-ins for the actors' handles."""

import socket

import pytest


class _Method:
    def __init__(self, calls: list, name: str, result=None):
        self.calls, self.name, self.result = calls, name, result

    def remote(self, *args):
        import ray

        self.calls.append((self.name, args))
        return ray.put(self.result)


class _Handle:
    """Records every call; each returns `results.get(method)` through the object store."""

    def __init__(self, **results):
        self.calls, self.results = [], results

    def __getattr__(self, name):
        return _Method(self.calls, name, self.results.get(name))


def test_engines_and_learner_meet_where_the_learner_listens(ray_session):
    from workers.weights.nccl import NcclTransport

    described = {"names": ["embed", "head.bias"], "dtype_names": ["bfloat16", "float32"], "shapes": [[1024, 1024], [8]]}
    learner = _Handle(nccl_endpoint=("10.1.2.3", 29517), weight_metadata=described)  # the learner's node, not this one
    engines = {0: _Handle(), 1: _Handle()}
    NcclTransport(timeout_s=30, bucket_bytes=1 << 20, tensor_parallel_size=2)._open(learner, engines, deadline=10**12)
    opened = [args for name, args in learner.calls if name == "nccl_open"]
    assert [args[:4] for args in opened] == [("nccl", "10.1.2.3", 29517, 5)]
    joins = [args[0] for engine in engines.values() for name, args in engine.calls if name == "init_nccl"]
    assert [(j["master_address"], j["master_port"], j["rank_offset"], j["world_size"]) for j in joins] == [
        ("10.1.2.3", 29517, 1, 5),
        ("10.1.2.3", 29517, 3, 5),
    ]
    # The packed chunk holds the largest tensor (2 MB of bf16) rather than the 1 MB bucket: none is packed alone past it.
    assert {j["packed_buffer_size_bytes"] for j in joins} == {2 << 20}
    # Every rank waits for the others a quarter of the sync's deadline, not vLLM's 300 s: the engines' workers read
    # the deadline through the timed engine's init info (vLLM's own NCCL engine refuses the key)
    assert {j["timeout_s"] for j in joins} == {7.5} and opened[0][4] == 7.5
    from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo

    from workers.weights.timed_nccl import TimedInitInfo

    assert TimedInitInfo(**joins[0]).timeout_s == 7.5
    with pytest.raises(TypeError, match="timeout_s"):
        NCCLWeightTransferInitInfo(**joins[0])


def test_the_learners_nccl_open_gives_up_at_its_deadline():
    """A rank that never joins (an engine stuck starting, a node gone): the learner's open fails at the
    group's deadline rather than after vLLM's 300 s, so the learner actor is free for the object-store
    fallback. The rendezvous comes before any GPU is touched, so this runs on CPU."""
    import time

    from workers.weights.nccl import CollectiveSender

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"rank 0 of the NCCL weight-transfer group at 127.0.0.1:{port} \(world size 2\)"):
        CollectiveSender("nccl", "127.0.0.1", port, world_size=2, timeout_s=2)
    assert time.monotonic() - start < 15


def test_the_learners_endpoint_is_free_on_its_own_node(ray_session):
    import ray

    from workers.weights.nccl import rendezvous

    address, port = ray.get(ray.remote(rendezvous).options(num_cpus=0).remote())
    assert address == ray.util.get_node_ip_address()  # one node here: the learner's is this one
    with socket.socket() as sock:
        sock.bind(("", port))  # nothing holds it
