"""Output paths are checked before any work starts: a path under a regular file, or in a folder
the user cannot write to, is an error naming the key and the part of the path in the way."""

import os

import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.output_paths import check_creatable


def test_a_new_path_under_existing_folders_is_fine_and_nothing_is_created(tmp_path):
    check_creatable(tmp_path / "a" / "b" / "run", "output_dir", folder=True)
    check_creatable(tmp_path / "out" / "x.parquet", "--out", folder=False)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_where_a_file_is_expected(tmp_path):
    with pytest.raises(UserError, match=r"^--out .*/x.parquet is a folder \(expected a file path\)$"):
        (tmp_path / "x.parquet").mkdir()
        check_creatable(tmp_path / "x.parquet", "--out", folder=False)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: permissions cannot be tested as root")
def test_a_folder_without_write_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        with pytest.raises(
            UserError, match=rf"^output_dir {locked}/run: no permission to write in {locked} \(choose a writable location\)$"
        ):
            check_creatable(locked / "run", "output_dir", folder=True)
    finally:
        locked.chmod(0o755)
