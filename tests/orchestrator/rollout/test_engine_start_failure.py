"""An engine that vLLM cannot start says why in the pool's one-line error: the root cause its engine
process logged (here, an attention head size vLLM's CPU backend does not support), not vLLM's
`EngineDeadError: ... See stack trace (above)`."""

import pytest

from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.launch import start_pool
from orchestrator.rollout.engine_group import EngineFailedError

pytestmark = pytest.mark.engines


def _model_with_head_dim_16(folder, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def test_an_engine_that_cannot_start_names_the_root_cause(tmp_path, learner_tokenizer, ray_session):
    model = tmp_path / "head-dim-16"
    _model_with_head_dim_16(model, learner_tokenizer)
    with pytest.raises(EngineFailedError) as failed:
        start_pool(ray_session, str(model), learner_tokenizer, RolloutConfig(engines=1))
    message = str(failed.value)
    assert (
        "engine 0 failed to start: EngineStartError: RuntimeError: Unsupported CPU attention configuration: head_dim=16"
        in message
    )
    assert "\n" not in message
