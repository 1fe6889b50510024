"""The tiny chat model is shaped like a hub chat model, and the arithmetic task holds its eval set out."""

from transformers import AutoTokenizer

from orchestrator.builtin import arithmetic_task
from orchestrator.builtin.chat_model import ChatModelSpec, chat_model
from orchestrator.builtin.math_answer import math_answer_reward


def test_chat_model_folder_has_chatml_tokens_and_stops_at_im_end(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path))
    folder = chat_model(ChatModelSpec(corpus_examples=200, train_steps=2, batch_size=8))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") in tokenizer.all_special_ids
    text = tokenizer.apply_chat_template(arithmetic_task.record(3, 4)["prompt"], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()


def test_eval_sums_are_held_out_and_ideal_replies_score():
    train, held_out = arithmetic_task.pairs()
    assert len(held_out) == arithmetic_task.EVAL_PAIRS and not set(train) & set(held_out) and len(train) + len(held_out) == 100
    records = arithmetic_task.eval_records()
    assert {(r["question"], r["answer"]) for r in records} == {(arithmetic_task.question(a, b), str(a + b)) for a, b in held_out}
    import random

    rng = random.Random(0)
    for kind, right in (("ideal", 1.0), ("boxed", 1.0), ("off_by_one", 0.0), ("ramble", 0.0)):
        reply = [[{"role": "assistant", "content": arithmetic_task.reply(kind, 3, 4, rng)}]]
        assert math_answer_reward([records[0]["prompt"]], reply, ["7"]) == [right], kind
