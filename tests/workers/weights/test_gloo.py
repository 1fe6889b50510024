"""The NCCL path's CPU stand-in, without Ray: a real gloo group of a sender and two receivers (threads
of this process), vLLM's packing on the sending side, the receivers' chunks cut where vLLM cuts them,
and both sides' checksums equal. The whole path, with engines and a learner, runs in
tests/orchestrator/training/test_gloo_sync_run.py."""

import socket
import threading

import pytest
import torch
from vllm.distributed.weight_transfer.packed_tensor import pack_tensors

from workers.weights import gloo
from workers.weights.buckets import Checksum


def _weights():
    torch.manual_seed(0)
    return [
        ("embed.weight", torch.randn(64, 16)),  # 4096 bytes: alone past a 3000-byte buffer
        ("layer.0.weight", torch.randn(8, 8)),
        ("layer.0.bias", torch.randn(8)),
        ("layer.1.weight", torch.randn(8, 8).to(torch.bfloat16)),
        ("steps", torch.tensor([3], dtype=torch.int64)),
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("buffer_bytes", [1, 300, 3000, 1 << 20])
def test_receivers_cut_the_chunks_where_vllms_packing_does(buffer_bytes):
    sent = []
    iterator = iter(_weights())
    while (chunk := pack_tensors(iterator, lambda item: item[1], buffer_bytes)) is not None:
        sent.append(chunk.names)
    described = [(name, list(tensor.shape), tensor.dtype) for name, tensor in _weights()]
    assert [[name for name, *_ in chunk] for chunk in gloo.chunks(described, buffer_bytes)] == sent


def test_a_broadcast_reaches_every_receiver_whole_and_both_sides_checksum_it():
    port, buffer_bytes, received, checksums, errors = _free_port(), 300, {1: [], 2: []}, {}, []
    described = [(name, list(tensor.shape), tensor.dtype) for name, tensor in _weights()]

    def rank(number: int) -> None:
        try:
            group = gloo.open_group("127.0.0.1", port, number, 3, timeout_s=30)
            if number == 0:
                checksums[0] = gloo.send_packed(group, _weights(), buffer_bytes)
            else:
                digest = Checksum()
                gloo.receive_packed(group, described, buffer_bytes, received[number].extend, digest)
                checksums[number] = digest.hexdigest()
            group.destroy()
        except Exception as error:  # reported below, with the rank
            errors.append((number, error))

    threads = [threading.Thread(target=rank, args=(number,)) for number in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and not any(thread.is_alive() for thread in threads)
    for number in (1, 2):
        assert [name for name, _ in received[number]] == [name for name, _ in _weights()]
        for (_, got), (_, want) in zip(received[number], _weights()):
            assert got.dtype == want.dtype and torch.equal(got, want)
    assert checksums[0] == checksums[1] == checksums[2]


def test_a_rank_that_never_joins_ends_the_rendezvous_at_its_timeout():
    import time

    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 0 of the gloo weight-transfer group at 127.0.0.1:\d+ \(world size 2\)"):
        gloo.open_group("127.0.0.1", _free_port(), 0, 2, timeout_s=2)
    assert time.monotonic() - start < 15


def test_the_checksum_sees_a_changed_byte():
    weights = _weights()
    first, second = Checksum(), Checksum()
    for name, tensor in weights:
        first.add_tensor(name, tensor)
    weights[2][1][0] += 1e-3
    for name, tensor in weights:
        second.add_tensor(name, tensor)
    assert first.hexdigest() != second.hexdigest()
