"""The gateway's allowlist of request fields (workers/agents/fields.py), against vLLM's own request models:
every field vLLM knows is placed, refused fields are refused whatever their value, and the run's settings
replace what an agent sends."""

import types

import pytest
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest

from orchestrator.contracts.agents import AgentConfig
from orchestrator.contracts.sampling import SamplingConfig
from workers.agents import fields
from workers.agents.gateway import Gateway, GatewayError

RUN = {"temperature": 0.7, "seed": 3}


def test_every_field_of_vllms_request_models_is_taken_set_or_refused_and_only_one_of_them():
    vllm_fields = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
    unplaced = vllm_fields - fields.KNOWN
    assert not unplaced, f"vLLM request fields the gateway does not place (add each to fields.py): {sorted(unplaced)}"
    assert not fields.KNOWN - vllm_fields, "fields.py names fields vLLM no longer has"
    sets = (fields.TAKEN, fields.SET_BY_RUN, fields.REFUSED)
    assert sum(len(one) for one in sets) == len(fields.KNOWN), "a field is in two of the sets"


@pytest.mark.parametrize("value", [0, False, "", [], {}, 1, True, "x", [1], {"1": 5}])
@pytest.mark.parametrize("field", sorted(fields.REFUSED) + ["not_a_vllm_field"])
def test_a_refused_or_unknown_field_is_refused_whatever_its_value(field, value):
    with pytest.raises(fields.FieldRefused, match=f"^{field}: not taken by the gateway"):
        fields.request({"messages": [], field: value}, RUN, "max_tokens", 16)


@pytest.mark.parametrize("field", sorted(fields.REFUSED) + ["not_a_vllm_field"])
def test_a_null_field_is_the_fields_default_and_passes(field):
    assert fields.request({field: None}, RUN, "max_tokens", 16)[field] is None


def test_taken_fields_pass_as_sent_and_the_token_limit_is_cut_to_the_session():
    body = {"messages": [{"role": "user", "content": "hi"}], "stop": ["\n"], "tools": [], "max_tokens": 100}
    sent = fields.request(body, RUN, "max_completion_tokens", 16)
    assert sent["stop"] == ["\n"] and sent["messages"] == body["messages"] and sent["tools"] == []
    assert sent["max_completion_tokens"] == 16 and "max_tokens" not in sent
    assert fields.request({"max_tokens": 4}, RUN, "max_tokens", 16)["max_tokens"] == 4
    assert fields.request({}, RUN, "max_tokens", 16)["max_tokens"] == 16


class _Tokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def test_every_field_set_by_the_run_is_replaced_whatever_the_agent_sent():
    """The gateway's own request building (a fake engine: only its tokenizer is used)."""
    gateway = Gateway(types.SimpleNamespace(get_tokenizer=_Tokenizer), 0, AgentConfig(fn="agents.py:run"), lambda: 0)
    sampling = SamplingConfig(temperature=0.5, top_p=0.9, top_k=7, seed=11, max_tokens=32)
    gateway.open("k", "token", sampling, group_id=2, sample_index=1)
    junk = object()
    sent = gateway._overrides(gateway._sessions["k"], {key: junk for key in fields.SET_BY_RUN}, "max_tokens", 0, 3)
    assert fields.SET_BY_RUN <= set(sent)
    assert not [key for key in fields.SET_BY_RUN if sent[key] is junk]
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["max_tokens"]) == (0.5, 0.9, 7, 32)
    assert sent["repetition_penalty"] == 1.0 and sent["use_beam_search"] is False and sent["model"] == "policy"
    assert sent["cache_salt"] == "policy-v3"  # no prefix cached under another policy version is reused
    with pytest.raises(GatewayError, match="logit_bias: not taken") as refused:
        gateway._overrides(gateway._sessions["k"], {"logit_bias": {}}, "max_tokens", 0, 3)
    assert refused.value.status == 400
