from pathlib import Path

from orchestrator.contracts.fingerprint import differences, fingerprint
from orchestrator.contracts.tokenizer import bundle_tokenizer


def test_same_tokenizer_has_no_differences(learner_tokenizer):
    assert differences(fingerprint(learner_tokenizer), fingerprint(learner_tokenizer)) == []


def test_differences_name_the_missing_tokens(learner_tokenizer, base_tokenizer):
    lines = differences(fingerprint(learner_tokenizer), fingerprint(base_tokenizer))
    text = "\n".join(lines)
    search_id = learner_tokenizer.convert_tokens_to_ids("<search>")
    assert f"added token '<search>' (id {search_id}) is missing" in text
    assert "'</search>'" in text
    assert f"vocab size {len(base_tokenizer)}, expected {len(learner_tokenizer)}" in text


def test_changed_special_token_is_named(learner_tokenizer):
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(learner_tokenizer.name_or_path)
    other.pad_token = other.eos_token
    assert any("pad_token" in line for line in differences(fingerprint(learner_tokenizer), fingerprint(other)))


def test_bundle_round_trip_keeps_the_fingerprint(learner_tokenizer, tmp_path: Path):
    from transformers import AutoTokenizer

    bundle = bundle_tokenizer(learner_tokenizer)
    assert 0 < sum(len(data) for data in bundle.files.values()) < 1 << 20
    loaded = AutoTokenizer.from_pretrained(bundle.write_to(tmp_path / "copy"))
    assert fingerprint(loaded) == fingerprint(learner_tokenizer)
