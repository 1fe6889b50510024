"""Packing a padded micro-batch into rows and reading per-token outputs back, without a model."""

import torch

from workers.learner import packing


def _micro_batch():
    """Three sequences, prompts left-padded to 3 columns, completions right-padded to 3."""
    ids = torch.tensor([[0, 11, 12, 13, 14, 0], [21, 22, 23, 24, 25, 26], [0, 0, 31, 32, 0, 0]])
    mask = (ids != 0).long()
    return ids, mask


def test_one_row_holds_every_real_token_with_positions_restarting():
    ids, mask = _micro_batch()
    packed = packing.pack(ids, mask, logits_to_keep=3, one_row=True)
    assert packed.input_ids.tolist() == [[11, 12, 13, 14, 21, 22, 23, 24, 25, 26, 31, 32]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 1]]
    assert packed.labels.tolist() == [[-100, -100, 13, 14, -100, -100, -100, 24, 25, 26, -100, 32]]  # completions only


def test_rows_as_long_as_the_longest_are_filled_longest_first_and_padded_at_position_zero():
    ids, mask = _micro_batch()
    packed = packing.pack(ids, mask, logits_to_keep=3, one_row=False)
    assert packed.input_ids.tolist() == [[21, 22, 23, 24, 25, 26], [11, 12, 13, 14, 31, 32]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 0, 1]]
    mask[2] = 0
    mask[2, 1:4] = 1  # three tokens: no room beside the four of the first sequence
    alone = packing.pack(ids, mask, logits_to_keep=3, one_row=False)
    assert alone.input_ids.tolist() == [[21, 22, 23, 24, 25, 26], [11, 12, 13, 14, 0, 0], [0, 31, 32, 0, 0, 0]]
    assert alone.position_ids[1].tolist() == [0, 1, 2, 3, 0, 0] and alone.labels[1, -2:].eq(-100).all()


def test_outputs_come_back_to_their_sequences_and_columns():
    ids, mask = _micro_batch()
    for one_row in (True, False):
        packed = packing.pack(ids, mask, logits_to_keep=3, one_row=one_row)
        # A causal model's output t is about token t + 1: here, that token's id.
        per_token = packed.input_ids[:, 1:].float().requires_grad_()
        back = packing.unpack(per_token, packed)
        assert back.tolist() == [[13, 14, 0], [24, 25, 26], [32, 0, 0]], one_row
        back.sum().backward()  # gradients reach the packed outputs
        assert per_token.grad.sum() == 6


def test_flash_attention_takes_one_row_and_sdpa_rows_of_the_longest():
    assert packing.one_row("flash_attention_2") and not packing.one_row("sdpa")
