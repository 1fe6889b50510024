"""The learner's side of a sync: buckets made one at a time, in the engines' dtype, always one policy."""

import numpy as np
import pytest
import torch

from workers.weights.buckets import BucketBuffer, WeightBucket, checksum, fill, groups, header, pack, tensors
from workers.weights.publication import Publication


def _weights():
    torch.manual_seed(0)
    return {"a": torch.randn(300), "b": torch.randn(40, 10), "steps": torch.arange(7), "c": torch.randn(500)}


def test_weights_travel_in_the_engines_dtype_and_integers_as_they_are():
    weights = _weights()
    buckets = pack(weights.items(), bucket_bytes=1000, dtype="bfloat16")
    sent = dict(tensors(buckets))
    assert sent["a"].dtype == torch.bfloat16 and torch.equal(sent["a"], weights["a"].to(torch.bfloat16))
    assert sent["steps"].dtype == torch.int64 and torch.equal(sent["steps"], weights["steps"])
    assert sum(bucket.nbytes for bucket in buckets) < sum(t.numel() * t.element_size() for t in weights.values()) * 0.6
    for group in groups(weights.items(), 1000, "bfloat16"):  # headers are known before any byte is made
        bucket = fill(group, "bfloat16")
        assert header(group, "bfloat16") == bucket.header()
        assert [len(bytes(chunk)) for chunk in bucket.chunks] == [entry[4] for entry in header(group, "bfloat16")]


def test_a_publication_hands_out_the_buckets_pack_would_make_and_their_checksum():
    weights = _weights()
    publication = Publication(weights.items(), bucket_bytes=1000, dtype="bfloat16")
    expected = pack(weights.items(), bucket_bytes=1000, dtype="bfloat16")
    assert publication.headers == [bucket.header() for bucket in expected]
    assert publication.nbytes == sum(bucket.nbytes for bucket in expected)
    handed = [publication.bucket(index) for index in range(len(expected))]
    assert not publication.open
    assert publication.checksum() == checksum(expected) == checksum(handed)


def test_buckets_are_handed_out_once_in_order():
    publication = Publication(_weights().items(), bucket_bytes=1000)
    with pytest.raises(ValueError, match="bucket 1 was asked for, but the next one to hand out is 0"):
        publication.bucket(1)
    publication.bucket(0)
    with pytest.raises(ValueError, match="not handed out"):
        publication.checksum()


def test_weights_that_change_mid_publication_do_not_reach_the_buckets_left():
    weights = _weights()
    before = {name: tensor.clone() for name, tensor in weights.items()}
    publication = Publication(weights.items(), bucket_bytes=1000)
    count = len(publication.headers)
    first = publication.bucket(0)
    first = WeightBucket(first.entries, tuple(bytes(chunk) for chunk in first.chunks))  # Ray copies it as it returns
    publication.keep()  # what the learner does before an optimizer step
    for tensor in weights.values():
        tensor.add_(1)
    sent = dict(tensors([first, *(publication.bucket(index) for index in range(1, count))]))
    assert all(torch.equal(sent[name], before[name]) for name in weights)


def test_a_publication_left_open_keeps_its_weights_once_and_as_they_travel():
    """An open publication across several optimizer steps (a sync given up part-way) copies the model
    once, not at every step, and in the engines' dtype."""
    weights = _weights()
    expected = checksum(pack(weights.items(), bucket_bytes=1000, dtype="bfloat16"))
    publication = Publication(weights.items(), bucket_bytes=1000, dtype="bfloat16")
    publication.keep()
    kept = {id(tensor) for group in publication._groups for _, tensor, *_ in group}
    assert all(tensor.dtype in (torch.bfloat16, torch.int64) for group in publication._groups for _, tensor, *_ in group)
    for _ in range(2):  # two optimizer steps
        for tensor in weights.values():
            tensor.add_(1)
        publication.keep()
    assert {id(tensor) for group in publication._groups for _, tensor, *_ in group} == kept
    handed = [publication.bucket(index) for index in range(len(publication.headers))]
    assert checksum(handed) == expected


def test_buckets_cast_into_a_kept_buffer_carry_the_same_bytes_and_reuse_its_memory():
    """The learner casts each bucket into one buffer it keeps (fresh pages cost more to write than
    the cast); Ray copies each bucket as it is handed out, so the next one may overwrite it."""
    weights = _weights()
    expected = pack(weights.items(), bucket_bytes=1000, dtype="bfloat16")
    buffer = BucketBuffer()
    for _ in range(2):  # a second publication reuses the first one's memory
        publication = Publication(weights.items(), bucket_bytes=1000, dtype="bfloat16", buffer=buffer)
        handed = []
        for index in range(len(expected)):
            bucket = publication.bucket(index)
            handed.append(WeightBucket(bucket.entries, tuple(bytes(chunk) for chunk in bucket.chunks)))  # as Ray stores it
        assert publication.checksum() == checksum(expected)
        assert [bucket.chunks for bucket in handed] == [tuple(bytes(chunk) for chunk in bucket.chunks) for bucket in expected]
        memory = buffer.get(0)
        assert memory.numel() == max(bucket.nbytes for bucket in expected)
    cast = fill(groups(weights.items(), 1000, "bfloat16")[0], "bfloat16", buffer).chunks[0]
    assert np.shares_memory(cast, buffer.get(0).numpy())  # written where the last bucket was, not in new pages
    group = next(group for group in groups(weights.items(), 1000, "bfloat16") if any(p[0] == "steps" for p in group))
    integers = fill(group, "bfloat16", buffer).chunks[[p[0] for p in group].index("steps")]
    assert np.shares_memory(integers, weights["steps"].numpy())  # sent as they are: a view, no copy at all
