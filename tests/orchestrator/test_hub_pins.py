"""Hub pins (`model_revision`, `prompts_revision`): a branch, tag or commit resolved to its commit
before the run starts, every load reading that commit, the commit recorded in the run folder, and a
resume refused when the revision has moved. No Ray, no network: a Hub cache written by hand, read
offline as a machine without network reads its own."""

import json

import pytest

from orchestrator import hub_pins
from orchestrator.builtin.tiny_model import tiny_model
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from tests.orchestrator.hub_cache import hub_repo, move_refs

GOOD, BROKEN = "1" * 40, "2" * 40  # the tag v1 is a working model; main has moved to one that does not load


@pytest.fixture
def cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read at import: set for this process too
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


@pytest.fixture
def tiny_repo(cache, tmp_path):
    """org/tiny: at v1 the built-in tiny model and its learner tokenizer in one folder; main is broken."""
    import shutil

    built = tiny_model()
    folder = tmp_path / "tiny"
    shutil.copytree(built.model_dir, folder)
    shutil.copytree(built.tokenizer_dir, folder, dirs_exist_ok=True)
    return hub_repo(cache, "org/tiny", {GOOD: folder, BROKEN: {"config.json": "{"}}, {"main": BROKEN, "v1": GOOD})


def test_a_branch_a_tag_and_a_commit_resolve_to_the_commit_the_cache_holds(tiny_repo):
    assert hub_pins.commit_of("org/tiny", "model", "v1", "model_revision") == GOOD
    assert hub_pins.commit_of("org/tiny", "model", "main", "model_revision") == BROKEN
    assert hub_pins.commit_of("org/tiny", "model", GOOD, "model_revision") == GOOD


def test_a_revision_the_cache_does_not_hold_offline_fails_naming_the_key(tiny_repo):
    with pytest.raises(UserError, match=r"^model_revision: cannot resolve revision 'v9' of the Hub model org/tiny"):
        hub_pins.commit_of("org/tiny", "model", "v9", "model_revision")
    with pytest.raises(UserError, match="prompts_revision: .*dataset org/none"):
        hub_pins.commit_of("org/none", "dataset", "main", "prompts_revision")


def test_a_revision_for_a_local_folder_or_a_builtin_is_refused(tmp_path):
    config = TrainConfig(model_revision="main")
    with pytest.raises(UserError, match=r"^model_revision: model is '.*', a built-in or local file or folder"):
        hub_pins.resolve(config, str(tmp_path))
    config = TrainConfig(model="org/tiny", prompts_revision="main")
    with pytest.raises(UserError, match=r"^prompts_revision: prompts is 'builtin:search'"):
        hub_pins.resolve(config, "org/tiny")


def test_the_model_and_its_tokenizer_load_at_the_pinned_commit_while_the_branch_is_broken(tiny_repo):
    from workers.learner.model_setup import load_model, load_tokenizer

    tokenizer = load_tokenizer("org/tiny", [], revision=GOOD)
    assert "<search>" in tokenizer.get_vocab()
    model = load_model("org/tiny", tokenizer, revision=GOOD)
    built = json.loads((tiny_model().model_dir / "config.json").read_text())
    assert model.config.vocab_size == built["vocab_size"]
    with pytest.raises(OSError, match="config.json"):  # the branch the pin guards against
        load_model("org/tiny", tokenizer)


def test_preflight_loads_the_pinned_model_and_reads_a_pinned_dataset_at_its_commit(tiny_repo, cache, monkeypatch):
    import datasets

    from orchestrator.training.preflight import preflight

    data_commit = "3" * 40
    hub_repo(cache, "org/prompts", {data_commit: {"README.md": ""}}, {"main": data_commit}, repo_type="dataset")
    asked = {}

    def builder(source, subset=None, revision=None):  # what datasets would be asked for, then the dataset is gone
        asked.update(source=source, revision=revision)
        raise datasets.exceptions.DatasetNotFoundError("offline")

    monkeypatch.setattr(datasets, "load_dataset_builder", builder)
    config = TrainConfig(model="org/tiny", model_revision="v1", prompts="org/prompts", prompts_revision="main")
    with pytest.raises(UserError, match="^prompts: 'org/prompts' is no local file"):
        preflight(config)
    assert asked == {"source": "org/prompts", "revision": data_commit}

    checked = preflight(TrainConfig(model="org/tiny", model_revision="v1"))  # the tokenizer is read at v1
    assert [(pin.key, pin.revision, pin.commit) for pin in checked.pins] == [("model_revision", "v1", GOOD)]
    assert hub_pins.pinned(TrainConfig(model="org/tiny", model_revision="v1"), checked.pins).model_revision == GOOD


def test_a_resume_refuses_a_revision_that_moved_or_a_pin_added_or_dropped(tiny_repo, tmp_path):
    pins = hub_pins.resolve(TrainConfig(model="org/tiny", model_revision="v1"), "org/tiny")
    hub_pins.record(pins, tmp_path)
    recorded = json.loads((tmp_path / hub_pins.FILE).read_text())
    assert recorded["model_revision"] == {
        "key": "model_revision",
        "repo": "org/tiny",
        "repo_type": "model",
        "revision": "v1",
        "commit": GOOD,
    }
    hub_pins.check_resume(pins, tmp_path)  # unchanged: resumes

    move_refs(tiny_repo, {"v1": BROKEN})
    moved = hub_pins.resolve(TrainConfig(model="org/tiny", model_revision="v1"), "org/tiny")
    with pytest.raises(UserError) as error:
        hub_pins.check_resume(moved, tmp_path)
    assert str(error.value).startswith(f"model_revision: org/tiny at 'v1' is now commit {BROKEN}, but the run started on ")
    assert f"resume with model_revision={GOOD}" in str(error.value)
    with pytest.raises(UserError, match=f"pinned to commit {GOOD} of org/tiny; resume with it"):
        hub_pins.check_resume((), tmp_path)
    with pytest.raises(UserError, match="^model_revision: the run started without it"):
        hub_pins.check_resume(pins, tmp_path / "elsewhere")


def test_the_model_key_is_trls_and_a_pinned_branch_is_read_as_trl_reads_it(tiny_repo):
    """TRL's ModelConfig names the key `model_revision` and passes it to from_pretrained as `revision`; here a
    branch is resolved to its commit first, and the model read at that commit is the one TRL would read."""
    from transformers import AutoModelForCausalLM
    from trl import ModelConfig

    assert "model_revision" in ModelConfig.__dataclass_fields__ and "model_revision" in TrainConfig.model_fields
    config = TrainConfig(model="org/tiny", model_revision="v1")
    pinned = hub_pins.pinned(config, hub_pins.resolve(config, "org/tiny"))
    as_trl = AutoModelForCausalLM.from_pretrained("org/tiny", revision=ModelConfig(model_revision="v1").model_revision)
    ours = AutoModelForCausalLM.from_pretrained("org/tiny", revision=pinned.model_revision)
    assert all((a == b).all() for a, b in zip(as_trl.state_dict().values(), ours.state_dict().values()))
