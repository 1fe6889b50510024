"""A tied embedding's lookup gradient added straight into `.grad` gives autograd's gradients."""

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from workers.learner.tied_embedding import accumulate_directly

PAD = 0


class _ScaledEmbedding(torch.nn.Embedding):
    def forward(self, ids):
        return super().forward(ids) * 3.0


def _model(tied: bool = True) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=PAD,
        tie_word_embeddings=tied,
    )
    return Qwen2ForCausalLM(config)


def _micro_batches() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randint(1, 300, (3, 12), generator=generator) for _ in range(3)]
    batches[1][:, :2] = PAD  # left padding: the pad row of the embedding gets no gradient
    batches[2][:, 5] = batches[2][0, 0]  # one token many times in a micro-batch
    return batches


def test_gradients_equal_autograds_over_accumulated_micro_batches():
    plain = _model()
    direct = copy.deepcopy(plain)
    assert accumulate_directly(direct, world_size=1, sharded=False)
    for model in (plain, direct):
        for ids in _micro_batches():
            model(input_ids=ids, labels=ids).loss.backward()
    for (name, expected), found in zip(plain.named_parameters(), direct.parameters()):
        assert found.grad is not None, name
        assert torch.allclose(found.grad, expected.grad, rtol=0, atol=1e-6), (
            name,
            (found.grad - expected.grad).abs().max().item(),
        )


def test_without_grad_the_lookup_is_untouched():
    model = _model()
    ids = _micro_batches()[0]
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    accumulate_directly(model, world_size=1, sharded=False)
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, expected)


@pytest.mark.parametrize(
    "case",
    ["untied", "two ranks", "sharded", "frozen embedding", "a lookup of its own"],
)
def test_left_to_autograd_where_it_would_be_wrong(case):
    model = _model(tied=case != "untied")
    if case == "frozen embedding":
        model.get_input_embeddings().weight.requires_grad_(False)
    if case == "a lookup of its own":  # as Gemma's, which scales what it looks up
        model.get_input_embeddings().__class__ = _ScaledEmbedding
    applied = accumulate_directly(model, world_size=2 if case == "two ranks" else 1, sharded=case == "sharded")
    assert not applied
    ids = _micro_batches()[0]
    model(input_ids=ids, labels=ids).loss.backward()
    grad = model.get_input_embeddings().weight.grad
    assert (grad is None) == (case == "frozen embedding")
