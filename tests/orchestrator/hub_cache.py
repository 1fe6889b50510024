"""A Hugging Face Hub cache written by hand, laid out as huggingface_hub lays it out
(`<type>s--<owner>--<name>/{blobs,refs,snapshots/<commit>}`), for tests that read Hub names offline."""

import shutil
from pathlib import Path


def hub_repo(cache: Path, repo: str, commits: dict[str, Path | dict[str, str]], refs: dict[str, str], repo_type="model"):
    """Write `repo` into the hub cache `cache`: each commit's snapshot is a copy of a folder or the given
    {file name: text}; `refs` maps branch or tag names to commits. Returns the repo's cache folder."""
    folder = cache / f"{repo_type}s--{repo.replace('/', '--')}"
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    for commit, content in commits.items():
        snapshot = folder / "snapshots" / commit
        if isinstance(content, Path):
            shutil.copytree(content, snapshot)
        else:
            snapshot.mkdir(parents=True)
            for name, text in content.items():
                (snapshot / name).write_text(text)
    move_refs(folder, refs)
    return folder


def move_refs(folder: Path, refs: dict[str, str]) -> None:
    (folder / "refs").mkdir(exist_ok=True)
    for name, commit in refs.items():
        (folder / "refs" / name).write_text(commit)
