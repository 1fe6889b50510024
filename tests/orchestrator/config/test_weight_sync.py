"""`weight_sync.delta`: when `auto` sends patches, and the settings refused before anything starts."""

import pytest

from orchestrator.config.train import TrainConfig, WeightSyncConfig


def test_auto_patches_narrow_engines_on_a_cluster_of_several_nodes_over_the_object_store_or_gloo():
    auto = WeightSyncConfig()
    assert auto.delta_on("bfloat16", False, False, one_node=False, backend="object_store")
    assert auto.delta_on("float16", False, False, one_node=False, backend="gloo")
    assert not auto.delta_on("bfloat16", False, False, one_node=True, backend="object_store")  # no network to spare
    assert not auto.delta_on("float32", False, False, one_node=False, backend="object_store")  # every element changes
    assert not auto.delta_on(None, False, False, one_node=False, backend="object_store")  # GPU auto: vLLM picks later
    assert not auto.delta_on("bfloat16", True, False, one_node=False, backend="object_store")  # a bfloat16 learner
    assert not auto.delta_on("bfloat16", False, True, one_node=False, backend="object_store")  # LoRA: the adapter alone
    assert not auto.delta_on("bfloat16", False, False, one_node=False, backend="nccl")
    assert WeightSyncConfig(delta="on").delta_on("float32", False, False, one_node=True, backend="object_store")
    assert not WeightSyncConfig(delta="off").delta_on("bfloat16", False, False, one_node=False, backend="object_store")


def test_an_unquoted_on_or_off_in_yaml_reads_as_the_setting():
    assert WeightSyncConfig(delta=True).delta == "on" and WeightSyncConfig(delta=False).delta == "off"


@pytest.mark.parametrize(
    "settings, names",
    [
        ({"weight_sync": {"delta": "on", "backend": "nccl"}}, "weight_sync.backend: nccl"),
        ({"weight_sync": {"delta": "on"}, "lora": {"r": 8}}, "set weight_sync.delta to auto or off with lora:"),
    ],
)
def test_delta_on_where_it_cannot_run_is_refused_saying_what_to_change(settings, names):
    with pytest.raises(ValueError, match=names):
        TrainConfig(**settings)
