"""Prompts from a Hugging Face dataset: a local folder that `datasets.load_dataset` reads, with the
prompt in a column of the user's choosing, a split and a subset; and the mistakes a user makes with
one (no network for a Hub name, a wrong column, split or subset), each a one-line error that names
the config key to fix. No Ray; the Hub is never reached (offline mode)."""

import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.data.prompts import read_prompt_data

TRAIN = {"question": ["Q: what is apple ? A:", "Q: what is pear ? A:"], "answer": ["red", "green"], "level": [1, 2]}
TEST = {"question": ["Q: what is plum ? A:"], "answer": ["blue"], "level": [3]}


@pytest.fixture(autouse=True)
def offline_with_a_private_cache(tmp_path, monkeypatch):
    """HF_HUB_OFFLINE, as a machine without network sets it (so a Hub name fails at once, not after
    retries), and a datasets cache of the test's own."""
    import datasets
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import: set for this process too
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")


def _dataset_folder(folder, splits: dict[str, dict]):
    """The layout `load_dataset` recognises, as the Hub's Parquet conversion writes it."""
    (folder / "data").mkdir(parents=True)
    for split, columns in splits.items():
        pq.write_table(pa.table(columns), folder / "data" / f"{split}-00000-of-00001.parquet")
    return folder


@pytest.fixture
def math_folder(tmp_path):
    return _dataset_folder(tmp_path / "math", {"train": TRAIN, "test": TEST})


@pytest.fixture
def subsets_folder(tmp_path):
    """Two subsets ('easy', 'hard'), each with train and test, declared in the README as on the Hub."""
    folder = tmp_path / "levels"
    for subset in ("easy", "hard"):
        (folder / subset).mkdir(parents=True)
        for split in ("train", "test"):
            pq.write_table(
                pa.table({"question": [f"{subset} {split} {i}" for i in range(3)]}), folder / subset / f"{split}.parquet"
            )
    configs = "".join(
        f"- config_name: {subset}\n  data_files:\n"
        + "".join(f"  - split: {split}\n    path: {subset}/{split}.parquet\n" for split in ("train", "test"))
        for subset in ("easy", "hard")
    )
    (folder / "README.md").write_text(f"---\nconfigs:\n{configs}---\n")
    return folder


def test_preflight_reads_the_prompt_column_and_passes_the_other_columns(math_folder):
    from orchestrator.config.train import TrainConfig
    from orchestrator.training.preflight import preflight

    long_question = "Q: " + "what is apple ? " * 20 + "A:"
    _dataset_folder(math_folder.parent / "long", {"train": {**TRAIN, "question": [long_question, TRAIN["question"][1]]}})
    config = TrainConfig(
        prompts=str(math_folder),
        prompts_column="question",
        eval_prompts=str(math_folder),  # its test split, by default
        eval_prompts_column="question",
        max_completion_length=8,
    )
    checked = preflight(config)
    assert checked.data.prompts == TRAIN["question"]
    assert list(checked.data.columns) == [{"answer": "red", "level": 1}, {"answer": "green", "level": 2}]
    assert checked.data.eval_set.prompts == TEST["question"] and list(checked.data.eval_set.columns) == [
        {"answer": "blue", "level": 3}
    ]

    # a dropped prompt takes its row of the other columns with it
    dropping = config.model_copy(
        update={"prompts": str(math_folder.parent / "long"), "max_prompt_length": 20, "drop_long_prompts": True}
    )
    checked = preflight(dropping)
    assert checked.dropped_prompts == 1 and checked.data.prompts == [TRAIN["question"][1]]
    assert list(checked.data.columns) == [{"answer": "green", "level": 2}]


def test_the_chosen_column_is_the_prompt_and_a_prompt_column_stays_a_column(tmp_path):
    folder = _dataset_folder(tmp_path / "both", {"train": {"question": ["Q: a ? A:"], "prompt": ["<chat>Q: a ? A:"]}})
    jsonl = tmp_path / "both.jsonl"
    jsonl.write_text('{"question": "Q: a ? A:", "prompt": "<chat>Q: a ? A:"}\n')
    for source in (folder, jsonl):
        data = read_prompt_data(str(source), column="question")
        assert data.prompts == ["Q: a ? A:"] and list(data.columns) == [{"prompt": "<chat>Q: a ? A:"}]


def test_split_and_subset_choose_the_rows(subsets_folder, tmp_path):
    assert read_prompt_data(str(subsets_folder), "question", "test", "hard").prompts == [f"hard test {i}" for i in range(3)]
    assert read_prompt_data(str(subsets_folder), "question", "train[:2]", "easy").prompts == ["easy train 0", "easy train 1"]

    from datasets import Dataset, DatasetDict

    saved = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_dict(TRAIN), "test": Dataset.from_dict(TEST)}).save_to_disk(str(saved))
    assert read_prompt_data(str(saved), "question", "test").prompts == TEST["question"]


def _one_line_error(source, **choices) -> str:
    with pytest.raises(UserError) as caught:
        read_prompt_data(str(source), **choices)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_a_hub_name_without_network_fails_at_once_in_one_line():
    start = time.monotonic()
    message = _one_line_error("trl-lib/DeepMath-103K")
    assert time.monotonic() - start < 10
    assert message.startswith("prompts: cannot load dataset 'trl-lib/DeepMath-103K': the Hugging Face Hub is unreachable")
    assert "eval_prompts: cannot load dataset 'gsm8k'" in _one_line_error("gsm8k", key="eval_prompts")


def test_train_reports_the_unreachable_hub_without_a_traceback(tmp_path, capsys):
    from orchestrator.__main__ import main

    out = tmp_path / "run"
    assert main(["train", "prompts=trl-lib/DeepMath-103K", "prompts_column=question", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert "error: prompts: cannot load dataset 'trl-lib/DeepMath-103K': the Hugging Face Hub is unreachable" in err
    assert "Traceback" not in err and not out.exists()


def test_a_missing_column_names_it_and_lists_the_columns(math_folder):
    message = _one_line_error(math_folder, column="query")
    assert message == (
        f"{math_folder} (split 'train'): no 'query' column (columns: question, answer, level); "
        "set prompts_column to the column that holds the prompts"
    )
    assert "set eval_prompts_column" in _one_line_error(math_folder, column="query", split="test", key="eval_prompts")


def test_a_missing_split_lists_the_splits(math_folder, tmp_path):
    message = _one_line_error(math_folder, column="question", split="validation", key="eval_prompts")
    assert message == f"eval_prompts_split: {math_folder} has no split 'validation' (splits: train, test)"

    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_dict(TRAIN)}).save_to_disk(str(tmp_path / "saved"))
    assert _one_line_error(tmp_path / "saved", column="question", split="test") == (
        f"prompts_split: {tmp_path / 'saved'} has no split 'test' (splits: train)"
    )


def test_a_missing_or_unnamed_subset_lists_the_subsets(subsets_folder):
    assert _one_line_error(subsets_folder, column="question", subset="medium") == (
        f"prompts_subset: dataset '{subsets_folder}' has no subset 'medium' (subsets: easy, hard)"
    )
    assert _one_line_error(subsets_folder, column="question") == (
        f"prompts_subset: dataset '{subsets_folder}' has several subsets (easy, hard); set prompts_subset to one"
    )


def test_folders_that_load_dataset_cannot_read(tmp_path):
    (tmp_path / "empty").mkdir()
    message = _one_line_error(tmp_path / "empty")
    assert message.startswith(f"prompts: datasets.load_dataset cannot read {tmp_path / 'empty'} (")
    (tmp_path / "broken" / "data").mkdir(parents=True)
    (tmp_path / "broken" / "data" / "train-00000-of-00001.parquet").write_text("not parquet")
    message = _one_line_error(tmp_path / "broken")
    assert message.startswith(f"prompts: {tmp_path / 'broken'} cannot be read (Parquet magic bytes not found")


def test_in_a_config_file_a_hub_name_stays_a_name_and_a_folder_beside_it_is_a_path(tmp_path, monkeypatch):
    from orchestrator.config.loading import load_config
    from orchestrator.config.train import TrainConfig

    _dataset_folder(tmp_path / "project" / "my_data", {"train": TRAIN})
    (tmp_path / "project" / "run.yaml").write_text(
        "prompts: my_data\nprompts_column: question\neval_prompts: trl-lib/DeepMath-103K\n"
    )
    monkeypatch.chdir(tmp_path)
    config = load_config(TrainConfig, tmp_path / "project" / "run.yaml", [])
    assert (config.prompts, config.eval_prompts) == (str(tmp_path / "project" / "my_data"), "trl-lib/DeepMath-103K")
