import torch

from workers.weights.buckets import WeightBucket, checksum, pack, tensors


def test_round_trip_across_buckets_and_the_header_a_large_tensor_in_pieces():
    sent = {
        "a.weight": torch.randn(4, 8),
        "b.bias": torch.arange(5, dtype=torch.float32),
        "c.weight": torch.randn(100, 3).to(torch.bfloat16),
    }
    buckets = pack(sent.items(), bucket_bytes=200)
    assert len(buckets) == 4  # a (128 B) + b (20 B) share one bucket; c (600 B) travels in three pieces
    assert max(bucket.nbytes for bucket in buckets) <= 200
    rebuilt = [WeightBucket.from_header(b.header(), tuple(bytes(c) for c in b.chunks)) for b in buckets]
    out = dict(tensors(rebuilt))
    assert out.keys() == sent.keys()
    for name, tensor in sent.items():
        assert out[name].dtype == tensor.dtype and torch.equal(out[name], tensor)
    assert checksum(rebuilt) == checksum(buckets)


def test_cpu_weights_are_packed_without_a_copy_and_laid_out_aligned():
    tensors = {"odd": torch.ones(3, dtype=torch.int8), "w": torch.randn(5, dtype=torch.float64)}
    (bucket,) = pack(tensors.items())
    assert bucket.chunks[1].ctypes.data == tensors["w"].data_ptr()
    assert [e.offset for e in bucket.entries] == [0, 64] and bucket.nbytes == 64 + 40


def test_checksum_sees_a_changed_value():
    tensors = {"w": torch.zeros(3)}
    before = checksum(pack(tensors.items()))
    tensors["w"][1] = 1e-6
    assert checksum(pack(tensors.items())) != before


def test_checksum_sees_one_flipped_byte_anywhere():
    (bucket,) = pack({"w": torch.randn(1000), "b": torch.randn(10)}.items())
    for index in range(2):
        chunks = [bytearray(c) for c in bucket.chunks]
        chunks[index][len(chunks[index]) // 2] ^= 0x01
        assert checksum([WeightBucket(bucket.entries, tuple(chunks))]) != checksum([bucket])
