"""Model folders are checked from their file headers before anything loads them: what a user
copying a model by hand gets wrong (a shard left out, a file cut short) is named."""

import json
import shutil

from orchestrator.models import model_folder_problem


def test_the_tiny_model_folder_passes(tiny):
    assert model_folder_problem(tiny.model_dir) is None


def test_a_shard_named_in_the_index_but_missing(tiny, tmp_path):
    folder = tmp_path / "sharded"
    shutil.copytree(tiny.model_dir, folder)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert model_folder_problem(folder) == (
        "weight shards ['model-00002-of-00002.safetensors'] named in model.safetensors.index.json are missing"
    )


def test_a_truncated_pytorch_bin(tiny, tmp_path):
    import torch

    folder = tmp_path / "bin"
    folder.mkdir()
    shutil.copy(tiny.model_dir / "config.json", folder)
    torch.save({"w": torch.zeros(1000)}, folder / "pytorch_model.bin")
    assert model_folder_problem(folder) is None
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    assert model_folder_problem(folder) == "pytorch_model.bin is empty or truncated; re-copy or re-save the model"
