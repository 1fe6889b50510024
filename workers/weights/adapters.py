"""LoRA runs: the adapter is the policy that travels; the base weights travel once per engine.

The learner publishes PEFT's tensors: the base model's under their Hugging Face names (vLLM's model
loader takes those), the adapter's under PEFT's own names (`get_peft_model_state_dict`), which all
start with `base_model.model.`, a prefix no Hugging Face weight name has. A new engine gets both
(base first); every later sync only the adapter. The engine writes the adapter as a PEFT folder
(`adapter_config.json` + `adapter_model.safetensors`), which vLLM's LoRA loader reads, and swaps
it in place of the adapter it served (workers/weights/receiving.py).

A sync's checksum has one part per kind of tensor, in the order base, adapter ("<base>+<adapter>";
a full-model run has only the first), so the learner's and each engine's can be compared however
the tensors were loaded.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path

import torch

from workers.weights.buckets import Piece, WeightBucket, groups, tensors

ADAPTER_PREFIX = "base_model.model."
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def groups_apart(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, dtype: str | None = None
) -> list[list[Piece]]:
    """`buckets.groups`, with base and adapter tensors never in one bucket."""
    runs = itertools.groupby(named_tensors, key=lambda named: named[0].startswith(ADAPTER_PREFIX))
    return [group for _, run in runs for group in groups(run, bucket_bytes, dtype)]


def is_adapter(bucket: WeightBucket) -> bool:
    """Whether a bucket holds adapter tensors (a bucket never mixes the two kinds: `groups_apart`)."""
    return bool(bucket.entries) and bucket.entries[0].name.startswith(ADAPTER_PREFIX)


def is_adapter_header(header: list) -> bool:
    """`is_adapter` of a bucket's `WeightBucket.header()`."""
    return bool(header) and header[0][0].startswith(ADAPTER_PREFIX)


def combined_checksum(base: str | None, adapter: str | None) -> str:
    return "+".join(part for part in (base, adapter) if part is not None)


def write_adapter(folder: Path, config: dict, buckets: list[WeightBucket]) -> Path:
    """Write the adapter's buckets as a PEFT folder (replaced whole: vLLM never reads half of one)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{ADAPTER_WEIGHTS}.partial"
    save_file(dict(tensors(buckets, copy=True)), partial)
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2))
    partial.replace(folder / ADAPTER_WEIGHTS)
    return folder
