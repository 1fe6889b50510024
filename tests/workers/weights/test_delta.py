"""Delta sync's plain parts, without Ray: the learner's patches from its baseline, the engine's copy that
applies and checks them, and the driver's book of who takes a patch and who the dense weights."""

import pytest
import torch

from workers.weights.delta import INDICES, VALUES, DeltaBook, DeltaEncoder, Mirror, PatchRejected, changed


def _model(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(64, 32, generator=generator),
        "layer.0.weight": torch.randn(32, 32, generator=generator),
        "layer.0.bias": torch.randn(32, generator=generator),
        "steps": torch.tensor([7]),  # not floating point: always dense
    }


def _step(weights: dict[str, torch.Tensor], lr: float, seed: int = 1) -> dict[str, torch.Tensor]:
    """An optimizer step's change: small against the weights, as GRPO's are."""
    generator = torch.Generator().manual_seed(seed)
    return {n: t + lr * torch.randn(t.shape, generator=generator) if t.is_floating_point() else t for n, t in weights.items()}


def _loaded(encoder: DeltaEncoder, version: int) -> Mirror:
    mirror = Mirror()
    for _ in mirror.record((name, tensor.clone()) for name, tensor in encoder.anchor(_model().items(), version)):
        pass
    mirror.loaded(version)
    return mirror


def test_a_bfloat16_patch_sends_the_changed_elements_and_the_engine_ends_bit_identical_to_the_cast():
    encoder = DeltaEncoder("bfloat16")
    mirror = _loaded(encoder, version=0)
    new = _step(_model(), lr=1e-3)
    manifest, wire = encoder.encode(new.items(), version=1)
    weights = dict(mirror.apply(manifest, wire))
    for name, tensor in new.items():
        cast = tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
        assert torch.equal(weights[name].view(-1), cast.view(-1)), name  # bits, not closeness
    assert set(manifest.sparse) == {"embed.weight", "layer.0.weight", "layer.0.bias"}
    sizes = [tensor.element_size() for _, tensor in wire]
    assert sizes == sorted(sizes, reverse=True)  # each starts aligned when packed end to end (gloo)
    names = [name for name, _ in wire]
    assert names.index("embed.weight" + INDICES) < names.index("embed.weight" + VALUES)
    print(f"\ndensity {manifest.density:.3f} after a 1e-3 step")
    assert 0 < manifest.density < 0.5 and mirror.version == 1 and manifest.checksum == encoder.checksum


def test_float32_engines_see_every_element_change_and_each_tensor_goes_dense():
    encoder = DeltaEncoder(None)
    mirror = _loaded(encoder, version=0)
    manifest, wire = encoder.encode(_step(_model(), lr=1e-3).items(), version=1)
    assert manifest.sparse == {} and manifest.density == 1.0
    assert sorted(name for name, _ in wire) == sorted(_model())  # every tensor whole
    mirror.apply(manifest, wire)
    assert mirror.version == 1


def test_a_patch_for_another_version_is_rejected_before_it_touches_the_copy():
    encoder = DeltaEncoder("bfloat16")
    mirror = _loaded(encoder, version=3)
    encoder.version = 2  # the learner's baseline is another version than the engine's
    before = {name: tensor.clone() for name, tensor in mirror.weights.items()}
    manifest, wire = encoder.encode(_step(_model(), lr=1e-3).items(), version=4)
    with pytest.raises(PatchRejected, match="it holds version 3, the patch is against version 2"):
        mirror.apply(manifest, wire)
    assert all(torch.equal(before[name], mirror.weights[name]) for name in before) and mirror.version == 3


@pytest.mark.parametrize("fault", ["dropped", "corrupted"])
def test_a_dropped_or_corrupted_patch_is_caught_by_the_checksum_and_the_copy_is_then_no_version(fault):
    encoder = DeltaEncoder("bfloat16")
    mirror = _loaded(encoder, version=0)
    manifest, wire = encoder.encode(_step(_model(), lr=1e-3).items(), version=1)
    if fault == "dropped":
        wire = [(name, tensor) for name, tensor in wire if not name.startswith("layer.0.weight#")]
    else:
        wire = [(name, tensor.clone()) for name, tensor in wire]
        wire[1][1][0] += 1  # one value of the embedding's patch
    with pytest.raises(PatchRejected, match=rf"checksum \w+, the learner's {manifest.checksum}"):
        mirror.apply(manifest, wire)
    assert mirror.version is None  # only a dense load makes it a version again


def test_changed_elements_are_found_by_their_bits():
    old = torch.tensor([0.0, 1.0, 2.0, 3.0] * 4, dtype=torch.bfloat16)
    new = old.clone()
    new[0] = -0.0  # equal as numbers, different bits: an engine must get the learner's bits
    assert changed(old, new)[0].tolist() == [0] and changed(old, old.clone())[0].tolist() == []
    new[5] = float("nan")  # NaN means "unchanged" to vLLM's sparse loader: such a tensor goes dense
    assert changed(old, new) is None
    assert changed(old, new.add(1)) is None  # every element changed: dense is smaller
    assert changed(torch.arange(8), torch.arange(8) + 1) is None  # integers: dense


def test_the_book_patches_engines_that_hold_the_baseline_and_anchors_the_others():
    book = DeltaBook(anchor_every=2)
    assert book.split([1, 0]) == ([], [0, 1], True)  # no baseline yet: every engine dense
    book.anchored(5, [0, 1], everyone=True)
    assert book.split([0, 1, 2]) == ([0, 1], [2], False)  # engine 2 is new: it alone takes the whole model
    book.patched(6, accepted=[0], rejected=[1])
    book.anchored(6, [1, 2], everyone=False)
    assert book.dense_resyncs == 1 and book.split([0, 1, 2]) == ([0, 1, 2], [], False)
    book.patched(7, accepted=[0, 1, 2], rejected=[])
    assert book.split([0, 1, 2]) == ([], [0, 1, 2], True)  # two patches since the anchor: every engine dense
    book.anchored(8, [0, 1, 2], everyone=True)
    book.forget([1])
    assert book.split([0, 1, 2]) == ([0, 2], [1], False)
    book.anchored(8, [1], everyone=False)  # a joining engine's anchor is not every engine's
    book.patched(9, accepted=[0, 1, 2], rejected=[])
    book.patched(10, accepted=[0, 1, 2], rejected=[])
    assert book.split([0, 1, 2])[2]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs 1 CUDA GPU")
def test_a_learner_on_a_gpu_computes_the_same_patch_there_and_sends_it_from_host_memory():
    on_host, on_gpu = DeltaEncoder("bfloat16"), DeltaEncoder("bfloat16")
    mirror = _loaded(on_host, version=0)
    on_gpu.anchor(((name, tensor.cuda()) for name, tensor in _model().items()), version=0)
    assert set(on_gpu.on_device) == set(_model()) and not on_host.on_device
    for version, seed in ((1, 1), (2, 2)):
        new = _step(_model(), lr=1e-3, seed=seed)
        expected, expected_wire = on_host.encode(new.items(), version)
        manifest, wire = on_gpu.encode(((name, tensor.cuda()) for name, tensor in new.items()), version)
        assert manifest == expected and not any(tensor.is_cuda for _, tensor in wire)
        assert [name for name, _ in wire] == [name for name, _ in expected_wire]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(wire, expected_wire))
        mirror.apply(manifest, wire)  # the engine's copy checks out against the GPU learner's checksum
    assert mirror.version == 2
