"""A rollout file is written whole or not at all: a failed write (a full disk) leaves no file, and
its error names the file."""

import errno

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.rollout.parquet import write_parquet


def test_a_failed_write_leaves_no_file_and_its_error_names_the_file(tmp_path, monkeypatch):
    def fills_the_disk(table, where) -> None:  # as Arrow does: part of the file, then an error naming none
        with open(where, "wb") as half:
            half.write(b"PAR1 half")
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pq, "write_table", fills_the_disk)
    path = tmp_path / "rollouts" / "step-000003.parquet"
    with pytest.raises(OSError) as raised:
        write_parquet(pa.table({"step": [3]}), path)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert list(path.parent.iterdir()) == []
