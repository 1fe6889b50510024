import hashlib

from orchestrator.builtin import search_task
from orchestrator.builtin.tiny_model import TinyModelSpec, tiny_model


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_rebuild_is_bit_for_bit_identical(tmp_path, monkeypatch):
    spec = TinyModelSpec(corpus_examples=300, train_steps=5, batch_size=8)
    digests = []
    for cache in ("a", "b"):
        monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / cache))
        built = tiny_model(spec)
        digests.append((_digest(built.model_dir), _digest(built.tokenizer_dir)))
    assert digests[0] == digests[1]
    assert "model.safetensors" in digests[0][0]


def test_seed_trap_layout(tiny, learner_tokenizer, base_tokenizer):
    """The model folder carries the base tokenizer; the learner tokenizer adds <search>."""
    import json

    config = json.loads((tiny.model_dir / "config.json").read_text())
    assert "<search>" not in base_tokenizer.get_vocab()
    assert learner_tokenizer.convert_tokens_to_ids("<search>") == len(base_tokenizer)
    assert config["vocab_size"] == len(learner_tokenizer)
    assert learner_tokenizer.pad_token is None and base_tokenizer.pad_token is None


def test_reward_scores_the_call():
    prompt = search_task.prompt_for("apple")
    completions = [" <search> apple </search>", " <search> river </search>", " <search> apple", " apple is a thing"]
    assert search_task.search_call_reward([prompt] * 4, completions) == [1.0, 0.5, 0.25, 0.0]
