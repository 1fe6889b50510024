"""The transformers fence: it accepts only the release its private names were read from, and what
packing relies on is still there."""

import pytest

from workers.fences import transformers as fenced_transformers


def test_the_installed_transformers_is_the_pinned_one():
    fenced_transformers.check_version()


@pytest.mark.parametrize("version", ["5.20.0", "5.18.3", "4.19.0", "5.19.0rc1"])
def test_another_transformers_is_refused_naming_both_versions(version):
    with pytest.raises(RuntimeError, match=rf"transformers {version} is installed, .* transformers 5\.19\.x"):
        fenced_transformers.check_version(version)


def test_packed_sequences_are_read_from_position_ids_and_the_attention_is_named(tiny):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.masking_utils import find_packed_sequence_indices

    packed = find_packed_sequence_indices(torch.tensor([[0, 1, 2, 0, 1, 0]]))
    assert packed.tolist() == [[0, 0, 0, 1, 1, 2]]
    model = AutoModelForCausalLM.from_pretrained(tiny.model_dir, attn_implementation="eager")
    assert fenced_transformers.attention_implementation(model) == "eager"
