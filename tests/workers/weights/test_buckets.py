import torch

from workers.weights.buckets import WeightBucket, checksum, pack, unpack


def test_round_trip_across_buckets_and_the_wire_format():
    tensors = {
        "a.weight": torch.randn(4, 8),
        "b.bias": torch.arange(5, dtype=torch.float32),
        "c.weight": torch.randn(100, 3).to(torch.bfloat16),
    }
    buckets = pack(tensors.items(), bucket_bytes=200)
    assert len(buckets) == 2  # a (128 B) + b (20 B) share one bucket; c (600 B) gets its own
    wired = [WeightBucket.from_wire(b.to_wire()) for b in buckets]
    out = dict(item for bucket in wired for item in unpack(bucket))
    assert out.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert out[name].dtype == tensor.dtype and torch.equal(out[name], tensor)
    assert checksum(wired) == checksum(buckets)


def test_checksum_sees_a_changed_value():
    tensors = {"w": torch.zeros(3)}
    before = checksum(pack(tensors.items()))
    tensors["w"][1] = 1e-6
    assert checksum(pack(tensors.items())) != before
