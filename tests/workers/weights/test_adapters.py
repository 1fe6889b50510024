"""A LoRA run's weights in transit: base and adapter never share a bucket, the checksum has a part
per kind (a full-model run's is unchanged), and the engine writes a PEFT folder vLLM can read."""

import json

import torch
from safetensors.torch import load_file

from workers.weights import adapters
from workers.weights.buckets import checksum, fill, pack
from workers.weights.publication import Publication

BASE = [("model.embed_tokens.weight", torch.randn(8, 4)), ("model.norm.weight", torch.ones(4))]
ADAPTER = [
    ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", torch.randn(2, 4)),
    ("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", torch.randn(4, 2)),
]


def test_base_and_adapter_tensors_never_share_a_bucket():
    groups = adapters.groups_apart(BASE + ADAPTER, bucket_bytes=1 << 20)  # room for all in one
    buckets = [fill(group) for group in groups]
    assert [[e.name for e in b.entries] for b in buckets] == [[name for name, _ in BASE], [name for name, _ in ADAPTER]]
    assert [adapters.is_adapter(b) for b in buckets] == [False, True]
    assert [adapters.is_adapter_header(b.header()) for b in buckets] == [False, True]


def _published(named) -> str:
    """The checksum the learner reports for a sync of `named` (workers/weights/publication.py)."""
    publication = Publication(named, 1 << 20)
    for index in range(len(publication.headers)):
        publication.bucket(index)
    return publication.checksum()


def test_the_checksum_has_a_part_per_kind_and_a_full_model_keeps_its_own():
    full = pack(BASE, 1 << 20)
    assert _published(BASE) == checksum(full)
    base_part, adapter_part = _published(BASE + ADAPTER).split("+")
    assert base_part == checksum(full) and adapter_part == checksum(pack(ADAPTER, 1 << 20))
    changed = [(name, tensor + 1) for name, tensor in ADAPTER]
    assert _published(changed) != adapter_part


def test_the_engine_writes_the_adapter_as_a_peft_folder(tmp_path):
    config = {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "peft_type": "LORA"}
    folder = adapters.write_adapter(tmp_path / "adapter", config, pack(ADAPTER, 1 << 20))
    assert json.loads((folder / "adapter_config.json").read_text()) == config
    written = load_file(str(folder / "adapter_model.safetensors"))
    assert list(written) == [name for name, _ in ADAPTER]
    assert all(torch.equal(written[name], tensor) for name, tensor in ADAPTER)
    assert not list(folder.glob("*.partial"))
