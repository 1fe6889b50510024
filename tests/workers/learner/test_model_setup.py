import logging

import pytest

from workers.learner.model_setup import ModelSetupError, load_model, load_tokenizer


def test_pad_falls_back_to_eos_with_one_warning_for_a_model_given_as_a_path(tiny, caplog):
    with caplog.at_level(logging.WARNING):
        tokenizer = load_tokenizer(str(tiny.tokenizer_dir), [])
        model = load_model(str(tiny.model_dir), tokenizer)
    assert tokenizer.pad_token == tokenizer.eos_token and tokenizer.pad_token_id == tokenizer.eos_token_id
    warnings = [r.message for r in caplog.records if "pad token" in r.message]
    assert len(warnings) == 1 and "using EOS" in warnings[0]
    assert model.generation_config.pad_token_id == tokenizer.eos_token_id


def test_added_tokens_resize_the_embeddings(tiny):
    tokenizer = load_tokenizer(str(tiny.model_dir), ["<search>", "</search>", "<answer>"])  # base + 3 new
    model = load_model(str(tiny.model_dir), tokenizer, resize=True)
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    assert tokenizer.convert_tokens_to_ids("<answer>") == len(tokenizer) - 1


def test_tokenizer_larger_than_the_embedding_is_refused_without_added_tokens(tiny):
    tokenizer = load_tokenizer(str(tiny.tokenizer_dir), ["<extra>"])
    with pytest.raises(ModelSetupError, match=r"tokenizer has \d+ tokens but the model's embedding has \d+ rows"):
        load_model(str(tiny.model_dir), tokenizer, resize=False)
