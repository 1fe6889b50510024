"""Delta weight sync: after a dense anchor, only the elements that changed travel.

From one GRPO step to the next most bfloat16 weights do not change at all: an update smaller than half
a bfloat16 step rounds back to the same value. So the learner keeps the weights as the engines last
received them (cast to the engines' dtype: `DeltaEncoder.weights`, the baseline) and sends, per tensor,
whichever is smaller: a patch (the flat indices whose bits changed, int32, and the new values) or the
dense tensor. The engine keeps the same copy (`Mirror`, in its vLLM worker's process), applies the
patch to it, and checks the checksum of every weight it now holds against the learner's before any
of it reaches the model:

    learner    encoder.anchor(named, version)            dense: the baseline, as published
               encoder.encode(named, version)            -> Manifest, [(wire name, tensor), ...]
    engine     MIRROR.record(named, version)             a dense load, kept as it passes
               MIRROR.apply(manifest, wire)              -> every weight, patched and checked, or PatchRejected

A patch is applied only on top of the version it was computed against (`Manifest.base_version`); an
engine that holds another version, or whose checksum after the patch differs, rejects it with the model
untouched, and the driver sends it the dense weights in the same sync (`DeltaBook` counts those
resyncs). A patch's wire names are the weight's name with `INDICES` or `VALUES` appended, so patches
travel through the same buckets, rings and collectives as dense weights.

On CPU, vLLM repacks linear layers into oneDNN's layout after loading and frees their weights, so
nothing can be patched in place there: the engine's vLLM worker reloads every weight from its mirror
(the bytes on the wire are the patch; the load is local). vLLM's in-place sparse loader
(`load_checkpoint_weight_patches`) needs the weights vLLM keeps on a GPU.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where tensors are handled: the driver, which only keeps the book, runs without it
    import torch

log = logging.getLogger("orchestrator.weights")  # the driver's log (orchestrator/log.py)
INDICES, VALUES = "#delta.indices", "#delta.values"  # a patch's two tensors on the wire: NAME + INDICES, NAME + VALUES
REJECTED = "rejected: "  # how a worker's checksum reply says it did not apply a patch, and why
MAX_SPARSE_NUMEL = 2**31 - 1  # int32 flat indices (vLLM's sparse patches take int32)
_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}  # an integer view of each float size


class PatchRejected(Exception):
    """The engine did not apply a patch (its weights are another version, or the checksum after it
    differs): its model is untouched, and it takes the dense weights instead."""


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What comes with a patch: enough for the engine to apply and check it."""

    base_version: int  # the version the patch was computed against: the engine must hold it
    version: int  # the version the engine holds after it
    names: tuple[str, ...]  # every weight, in the checksum's order
    sparse: dict[str, tuple[int, ...]]  # the weights sent as patches: name -> full shape
    checksum: str  # of every weight after the patch (`full_checksum`)
    elements: int  # of the whole model
    sent: int  # elements sent: patch values and dense tensors
    nbytes: int  # of the whole model, as the engines hold it

    @property
    def density(self) -> float:
        """The share of the model's elements sent."""
        return self.sent / max(1, self.elements)

    def as_dict(self) -> dict:
        """For a Ray call or vLLM's msgspec-serialised `collective_rpc`: plain lists."""
        fields = dataclasses.asdict(self)
        return {**fields, "names": list(self.names), "sparse": {n: list(s) for n, s in self.sparse.items()}}

    @staticmethod
    def from_dict(fields: dict) -> Manifest:
        sparse = {name: tuple(shape) for name, shape in fields["sparse"].items()}
        return Manifest(**{**fields, "names": tuple(fields["names"]), "sparse": sparse})


def full_checksum(weights: dict[str, torch.Tensor], names: Iterable[str]) -> str:
    """XXH3 over every weight's name, dtype, shape and bytes, in `names` order: the engine's copy after a
    patch must give the learner's."""
    from workers.weights.buckets import Checksum

    digest = Checksum()
    for name in names:
        digest.add_tensor(name, weights[name])
    return digest.hexdigest()


def changed(old: torch.Tensor, new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The flat int32 indices where `new`'s bits differ from `old`'s and `new`'s values there, or None
    when the dense tensor is smaller on the wire (or the tensor cannot be a patch: not floating point,
    too large for int32 indices, or a NaN among its new values, which vLLM's sparse loader reads as
    "unchanged")."""
    import torch

    if not new.is_floating_point() or new.numel() > MAX_SPARSE_NUMEL or old.shape != new.shape or old.dtype != new.dtype:
        return None
    bits = getattr(torch, _BITS[new.element_size()])
    indices = torch.nonzero(old.reshape(-1).view(bits) != new.reshape(-1).view(bits)).squeeze(1)
    if indices.numel() * (4 + new.element_size()) >= new.numel() * new.element_size():
        return None
    values = new.reshape(-1)[indices]
    if torch.isnan(values).any():
        return None
    return indices.to(torch.int32), values


class DeltaEncoder:
    """Learner side: the engines' copy of the weights (the baseline), and the patches from it.

    The baseline lives in host memory, where the patches and dense tensors are sent from. A weight on a
    GPU also keeps a twin of its baseline there: the patch is computed on the GPU and only the patch
    crosses to the host (at Qwen2.5-0.5B's size on one H200, 0.05-0.09 s per sync instead of 1.9-2.4 s
    for every weight copied to the host and compared there), for one more copy of the weights in the
    engines' dtype on the learner's GPU."""

    def __init__(self, dtype: str | None):
        """`dtype`: the engines' weight dtype, if known (floating-point weights are cast to it)."""
        import torch

        self.dtype = getattr(torch, dtype) if dtype is not None else None
        self.weights: dict[str, torch.Tensor] = {}  # the baseline, in host memory
        self.on_device: dict[str, torch.Tensor] = {}  # its twin, for the weights on a GPU
        self.version: int | None = None
        self.checksum = ""

    def anchor(self, named: Iterable[tuple[str, torch.Tensor]], version: int) -> list[tuple[str, torch.Tensor]]:
        """Take `named` as the baseline of `version` (a copy, in the engines' dtype); returns it, to be sent dense."""
        self.weights, self.on_device = {}, {}
        for name, tensor in named:
            cast = self._cast(tensor)
            if cast.is_cuda:
                self.on_device[name] = cast.clone()
            self.weights[name] = cast.to("cpu", copy=True)
        self.version = version
        self.checksum = full_checksum(self.weights, self.weights)
        return list(self.weights.items())

    def encode(self, named: Iterable[tuple[str, torch.Tensor]], version: int) -> tuple[Manifest, list[tuple[str, torch.Tensor]]]:
        """The patch from the baseline to `named` as `version`, per tensor sparse or dense; the baseline
        becomes `named`. Returns its manifest and the tensors to send (in host memory), in order."""
        if self.version is None:
            raise RuntimeError("a weight patch was asked for before any dense anchor")
        wire, sparse, elements, sent, nbytes = [], {}, 0, 0, 0
        for name, tensor in named:
            parts, patched, count = self._diff(name, tensor)
            wire += parts
            elements += tensor.numel()
            nbytes += tensor.numel() * self.weights[name].element_size()
            sent += count
            if patched:
                sparse[name] = tuple(tensor.shape)
        # Wider elements first (a stable sort: each patch's indices still come before its values): vLLM's
        # packed collective chunks lay tensors end to end, and each must start at a multiple of its
        # element size to be viewed in place (gloo.py); int32 indices after an odd count of bfloat16
        # values would not.
        wire.sort(key=lambda item: -item[1].element_size())
        base, self.version = self.version, version
        self.checksum = full_checksum(self.weights, self.weights)
        manifest = Manifest(base, version, tuple(self.weights), sparse, self.checksum, elements, sent, nbytes)
        return manifest, wire

    def _diff(self, name: str, tensor: torch.Tensor) -> tuple[list[tuple[str, torch.Tensor]], bool, int]:
        """One weight's part of the patch, computed where its baseline's twin is (else in host memory):
        (its wire tensors, whether they are a patch, the elements sent). Its baseline becomes `tensor`."""
        host, twin = self.weights[name], self.on_device.get(name)
        new = self._cast(tensor) if twin is not None else self._cast(tensor).to("cpu")
        old = host if twin is None else twin
        patch = changed(old, new)
        if patch is None:
            old.copy_(new)
            if twin is not None:
                host.copy_(twin)
            return [(name, host)], False, new.numel()
        indices, values = patch
        old.view(-1)[indices.long()] = values
        if twin is not None:
            indices, values = indices.cpu(), values.cpu()
            host.view(-1)[indices.long()] = values
        return [(name + INDICES, indices), (name + VALUES, values)], True, values.numel()

    def _cast(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` in the engines' dtype, where it is."""
        cast = self.dtype is not None and tensor.is_floating_point()
        return tensor.detach().to(self.dtype) if cast else tensor.detach()


class Mirror:
    """Engine side: the weights the engine holds, in checkpoint coordinates, as last loaded (in its vLLM
    worker's process: `MIRROR`). None of it is kept unless the run syncs by deltas."""

    def __init__(self):
        self.weights: dict[str, torch.Tensor] = {}
        self.version: int | None = None

    def record(self, named: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """Pass a dense load's tensors on, keeping each (they must be the load's own copies); `loaded`
        then stamps the copy. Until then it is no version: a load that fails part-way leaves none."""
        self.start()
        for name, tensor in named:
            self.keep([(name, tensor)])
            yield name, tensor

    def keep(self, named: list[tuple[str, torch.Tensor]]) -> None:
        """Some of a dense load's tensors, as they load (after `start`)."""
        self.weights.update(named)

    def start(self) -> None:
        """A dense load begins: the copy is emptied, and is no version until `loaded`."""
        self.weights, self.version = {}, None

    def loaded(self, version: int) -> None:
        self.version = version

    def apply(self, manifest: Manifest, wire: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
        """Apply a patch and check the result: every weight, to load into the model. Raises
        `PatchRejected` (the model untouched; this copy then no version) if it holds another version than
        the patch's base, or the checksum after the patch is not the learner's."""
        received = list(wire)  # all of it, whatever happens: the sender's side waits for it to be taken
        if self.version != manifest.base_version:
            held = "no weights" if self.version is None else f"version {self.version}"
            raise PatchRejected(f"it holds {held}, the patch is against version {manifest.base_version}")
        if set(self.weights) != set(manifest.names):
            raise PatchRejected(f"it holds {len(self.weights)} weights, the patch's model {len(manifest.names)}")
        self.version = None  # from here on, until checked, this copy is no version
        try:
            self._patch(received)
        except (IndexError, KeyError, RuntimeError) as error:  # indices out of range, a tensor missing or misshapen
            raise PatchRejected(f"the patch does not fit its weights ({type(error).__name__}: {error})") from None
        found = full_checksum(self.weights, manifest.names)
        if found != manifest.checksum:
            raise PatchRejected(f"its weights after the patch have checksum {found}, the learner's {manifest.checksum}")
        self.version = manifest.version
        return [(name, self.weights[name]) for name in manifest.names]

    def _patch(self, received: list[tuple[str, torch.Tensor]]) -> None:
        indices = {}
        for name, tensor in received:
            if name.endswith(INDICES):
                indices[name.removesuffix(INDICES)] = tensor.long()
            elif name.endswith(VALUES):
                base = name.removesuffix(VALUES)
                self.weights[base].view(-1)[indices.pop(base)] = tensor
            else:
                self.weights[name] = tensor


MIRROR = Mirror()  # the one copy of a vLLM worker process (its model's)


class DeltaBook:
    """Driver side: which engines hold the learner's baseline (they take patches), when the next dense
    anchor is due, and what the syncs sent."""

    def __init__(self, anchor_every: int):
        """`anchor_every`: a dense sync of every engine after this many patches (weight_sync.anchor_every)."""
        self.anchor_every = anchor_every
        self.base: int | None = None  # the version of the learner's baseline
        self.held: dict[int, int] = {}  # engine -> the version its copy holds, checked
        self.patches = 0  # since the last anchor
        self.dense_resyncs = 0  # engines sent dense weights after rejecting a patch

    def split(self, engines: Iterable[int]) -> tuple[list[int], list[int], bool]:
        """(engines that take a patch, engines that take the dense weights, whether this is the anchor of
        every engine): every engine is dense when an anchor is due; else those that hold the baseline
        take a patch, and the others (new, replaced, or behind) the dense weights."""
        engines = sorted(engines)
        if self.base is None or self.patches >= self.anchor_every:
            return [], engines, True
        patched = [e for e in engines if self.held.get(e) == self.base]
        return patched, [e for e in engines if e not in patched], False

    def patched(self, version: int, accepted: Iterable[int], rejected: Iterable[int]) -> None:
        self.base = version
        self.patches += 1
        for engine_id in accepted:
            self.held[engine_id] = version
        for engine_id in rejected:
            self.held.pop(engine_id, None)
            self.dense_resyncs += 1

    def anchored(self, version: int, loaded: Iterable[int], everyone: bool) -> None:
        """A dense round of `version` reached `loaded`; `everyone`: it was the anchor of every engine."""
        self.base = version
        if everyone:
            self.patches = 0
        for engine_id in loaded:
            self.held[engine_id] = version

    def forget(self, engines: Iterable[int]) -> None:
        """Engines gone, or whose load failed: their copies are unknown."""
        for engine_id in engines:
            self.held.pop(engine_id, None)


def rejections(reports: dict[int, tuple[int, str]], version: int) -> list[int]:
    """The engines whose (version, checksum) report says they rejected the patch to `version`, each
    logged with why: they take the dense weights in the same sync."""
    rejected = sorted(e for e, (_, digest) in reports.items() if digest.startswith(REJECTED))
    for engine_id in rejected:
        why = reports[engine_id][1].removeprefix(REJECTED)
        log.warning(f"engine {engine_id} rejected the weight patch to version {version} ({why}); it takes the dense weights")
    return rejected


def figures(manifest: dict | None, dense_bytes: int, dense_resyncs: int) -> dict:
    """A delta sync's `SyncReport.delta`: the patch's density and the model's bytes, or for a sync that
    sent only whole models, density 1 and their bytes."""
    if manifest is None:
        return {"density": 1.0, "dense_resyncs": dense_resyncs, "model_bytes": dense_bytes}
    patch = Manifest.from_dict(manifest)
    return {"density": patch.density, "dense_resyncs": dense_resyncs, "model_bytes": patch.nbytes}
