"""Conversational prompts: read from every supported format, checked with file:line errors, and
rendered exactly as the tokenizer's own `apply_chat_template` renders them."""

import json

import pytest

from orchestrator.builtin.chat_model import CHAT_TEMPLATE, build_tokenizer
from orchestrator.contracts.errors import UserError
from orchestrator.data.conversations import (
    ChatTemplateError,
    render,
    render_records,
    require_template,
    split_messages,
    with_system_prompt,
)
from orchestrator.data.prompts import read_prompt_data
from orchestrator.training.requests import tokenize_prompts

SINGLE = [{"role": "user", "content": "What is 3 + 4?"}]
MULTI = [
    {"role": "system", "content": "You are a careful calculator."},
    {"role": "user", "content": "What is 1 + 1?"},
    {"role": "assistant", "content": "1 + 1 = 2. #### 2"},
    {"role": "user", "content": "And 3 + 4?"},
]


@pytest.fixture(scope="module")
def chat_tokenizer():
    texts = [f"{m['role']}\n{m['content']}" for m in SINGLE + MULTI] * 20
    tokenizer = build_tokenizer(texts, vocab_size=300)
    tokenizer.bos_token = "<|endoftext|>"  # a template that starts with BOS: tokenising must not add a second
    tokenizer.chat_template = "{{ bos_token }}" + CHAT_TEMPLATE
    return tokenizer


@pytest.mark.parametrize("messages", [SINGLE, MULTI], ids=["single", "multi"])
def test_rendering_equals_apply_chat_template(chat_tokenizer, messages):
    text = render(chat_tokenizer, messages)
    assert text == chat_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    expected_ids = chat_tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert tokenize_prompts([text], chat_tokenizer, conversational=True) == [expected_ids]


def test_render_records_keeps_the_messages_and_columns(chat_tokenizer):
    records = [{"prompt": SINGLE, "answer": "7"}, {"prompt": SINGLE, "answer": "7"}]  # duplicates stay two rows
    rendered, chat = render_records(records, chat_tokenizer, "chat-tok", "Be brief.", "p.jsonl")
    assert chat and len(rendered) == 2 and rendered[0]["answer"] == "7"
    conversations = split_messages(rendered, chat)
    assert conversations[0] == [{"role": "system", "content": "Be brief."}, *SINGLE]
    assert rendered[0]["prompt"] == render(chat_tokenizer, conversations[0]) and "Be brief." in rendered[0]["prompt"]


def test_a_conversation_with_its_own_system_message_keeps_it():
    assert with_system_prompt(MULTI, "Other.") == MULTI


def test_plain_prompts_pass_through(chat_tokenizer):
    records = [{"prompt": "Q: hi A:"}]
    assert render_records(records, chat_tokenizer, "chat-tok", None, "p.jsonl") == (records, False)


def test_mixed_formats_are_refused(chat_tokenizer):
    with pytest.raises(UserError, match=r"p.jsonl: prompt 1 is a string but prompt 0 is a conversation"):
        render_records([{"prompt": SINGLE}, {"prompt": "text"}], chat_tokenizer, "chat-tok", None, "p.jsonl")


def test_missing_template_names_the_tokenizer(learner_tokenizer):
    with pytest.raises(ChatTemplateError, match=r"the tokenizer /some/tok has no chat template: set chat_template"):
        require_template(learner_tokenizer, "/some/tok")


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([{"content": "hi"}], "message 0 has no 'role'"),
        ([{"role": "user"}], "message 0 has no 'content'"),
        ([{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}], "message 1 has unknown role 'robot'"),
        ([], "empty conversation"),
    ],
)
def test_bad_conversations_name_file_and_line(tmp_path, prompt, message):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": SINGLE}) + "\n" + json.dumps({"prompt": prompt}) + "\n")
    with pytest.raises(UserError) as caught:
        read_prompt_data(str(path))
    assert str(caught.value).startswith(f"{path}:2: {message}") and "\n" not in str(caught.value)


def test_parquet_and_saved_dataset_folders(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset

    rows = {"prompt": [SINGLE, MULTI], "answer": ["7", "7"]}
    pq.write_table(pa.table(rows), tmp_path / "p.parquet")
    Dataset.from_dict(rows).save_to_disk(str(tmp_path / "saved"))
    for source in (tmp_path / "p.parquet", tmp_path / "saved"):
        data = read_prompt_data(str(source))
        assert data.prompts == [SINGLE, MULTI] and list(data.columns) == [{"answer": "7"}, {"answer": "7"}]
    Dataset.from_dict({"prompt": [SINGLE, [{"role": "robot", "content": "x"}]]}).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(UserError, match=r"bad row 1: message 0 has unknown role 'robot'"):
        read_prompt_data(str(tmp_path / "bad"))


def test_a_parquet_message_without_content_names_the_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": [SINGLE, [{"role": "user"}]]}), tmp_path / "p.parquet")
    with pytest.raises(UserError, match=r"p.parquet row 1: message 0 has no 'content'"):
        read_prompt_data(str(tmp_path / "p.parquet"))


def test_generate_takes_string_prompts_only(tmp_path):
    from orchestrator.data.prompts import read_prompts

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": SINGLE}) + "\n")
    with pytest.raises(UserError, match=r"these prompts are conversations; this command takes string prompts"):
        read_prompts(path)
