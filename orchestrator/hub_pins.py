"""Hub pins: `model_revision` and `prompts_revision` name a branch, a tag or a commit of the Hub
model or dataset the run trains on, so that a run started today and one resumed next week read the
same bytes while the repository moves on.

Preflight resolves each revision to its commit (on the Hub when it is reachable, otherwise in the
local Hugging Face cache, where `HF_HUB_OFFLINE=1` machines keep their copies), every load of the run
asks for that commit (the learner's model, the driver's tokenizer, the dataset), and the run folder
records it in `hub_pins.json`. A resume resolves the revision again and refuses one that now names
another commit, so a branch that moved cannot change the data or the base model mid-run unnoticed.
A revision is refused for a local folder: it pins a Hub repository.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from orchestrator.contracts.errors import UserError, first_line

FILE = "hub_pins.json"


@dataclasses.dataclass(frozen=True)
class Pin:
    key: str  # the config key: model_revision or prompts_revision
    repo: str  # the Hub id
    repo_type: str  # "model" or "dataset"
    revision: str  # as the user wrote it: a branch, a tag or a commit
    commit: str


def resolve(config, model: str) -> tuple[Pin, ...]:
    """The run's pins: `model_revision` for `model` (what the model key resolved to) and
    `prompts_revision` for the prompts dataset, each resolved to its commit."""
    pins = []
    if config.model_revision is not None:
        _check_hub_name("model_revision", "model", model)
        pins.append(_pin("model_revision", model, "model", config.model_revision))
    if config.prompts_revision is not None:
        _check_hub_name("prompts_revision", "prompts", config.prompts)
        pins.append(_pin("prompts_revision", config.prompts, "dataset", config.prompts_revision))
    return tuple(pins)


def pin(config, model: str, resumed: Path | None = None):
    """(`config` with its revisions replaced by their commits, the pins): what preflight loads from. A
    resume (`resumed`: its run folder) must find the pins it started with."""
    pins = resolve(config, model)
    if resumed is not None:
        check_resume(pins, resumed)
    return pinned(config, pins), pins


def pinned(config, pins: tuple[Pin, ...]):
    """`config` with each pinned revision replaced by its commit: what every load of the run asks for."""
    return config.model_copy(update={pin.key: pin.commit for pin in pins}) if pins else config


def record(pins: tuple[Pin, ...], folder: Path) -> None:
    if pins:
        text = json.dumps({pin.key: dataclasses.asdict(pin) for pin in pins}, indent=2)
        (folder / FILE).write_text(text + "\n")


def check_resume(pins: tuple[Pin, ...], folder: Path) -> None:
    """A resumed run reads what the run started on: each recorded commit is what its revision resolves
    to now, and no recorded pin was dropped or added."""
    path = folder / FILE
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    now = {pin.key: pin for pin in pins}
    for key in sorted(set(recorded) | set(now)):
        before, pin = recorded.get(key), now.get(key)
        if before is None:
            raise UserError(f"{key}: the run started without it (its {pin.repo_type} unpinned); resume without {key}")
        if pin is None:
            raise UserError(f"{key}: the run started pinned to commit {before['commit']} of {before['repo']}; resume with it")
        if (pin.repo, pin.commit) != (before["repo"], before["commit"]):
            raise UserError(
                f"{key}: {pin.repo} at {pin.revision!r} is now commit {pin.commit}, but the run started on commit "
                f"{before['commit']} of {before['repo']} ({path}); resume with {key}={before['commit']} to continue on the "
                "same files, or start a new run"
            )


def commit_of(repo: str, repo_type: str, revision: str, key: str) -> str:
    """The commit `revision` of a Hub `repo` names: the Hub's answer when it is reachable, else the
    local cache's (the revisions it holds and the branch or tag names they were fetched under)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        return HfApi().repo_info(repo, repo_type=repo_type, revision=revision).sha
    except RevisionNotFoundError:
        raise UserError(f"{key}: the Hub {repo_type} {repo} has no revision {revision!r} (a branch, a tag or a commit)") from None
    except RepositoryNotFoundError:
        raise UserError(f"{key}: no Hub {repo_type} {repo} that this machine can read") from None
    except Exception as error:  # offline (HF_HUB_OFFLINE, no route to the Hub): the cache answers
        cached = _cached_commit(repo, repo_type, revision)
        if cached is None:
            raise UserError(
                f"{key}: cannot resolve revision {revision!r} of the Hub {repo_type} {repo}: the Hub is unreachable "
                f"({first_line(error)}) and the Hugging Face cache holds no revision of that name"
            ) from None
        return cached


def _cached_commit(repo: str, repo_type: str, revision: str) -> str | None:
    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:  # the cache as configured now (scan_cache_dir's default is the one at its import)
        cache = scan_cache_dir(constants.HF_HUB_CACHE)
    except CacheNotFound:
        return None
    for cached in cache.repos:
        if (cached.repo_id, cached.repo_type) != (repo, repo_type):
            continue
        for held in cached.revisions:
            if revision in held.refs or held.commit_hash == revision:
                return held.commit_hash
    return None


def _pin(key: str, repo: str, repo_type: str, revision: str) -> Pin:
    return Pin(key, repo, repo_type, revision, commit_of(repo, repo_type, revision, key))


def _check_hub_name(key: str, named_by: str, value: str) -> None:
    if value.startswith(("builtin:", "reasoning_gym:")) or Path(value).exists():
        raise UserError(
            f"{key}: {named_by} is {value!r}, a built-in or local file or folder; a revision pins a Hub repository "
            f"(remove {key}, or name the Hub id in {named_by})"
        )
