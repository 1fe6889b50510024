import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.data.prompts import PromptFileError, read_prompts


def test_reads_jsonl_and_parquet_in_order(tmp_path):
    prompts = ["a", "b", "a"]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("".join(json.dumps({"prompt": p, "id": i}) + "\n" for i, p in enumerate(prompts)))
    parquet = tmp_path / "p.parquet"
    pq.write_table(pa.table({"prompt": prompts}), parquet)
    assert read_prompts(jsonl) == prompts
    assert read_prompts(parquet) == prompts


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"prompt": "x"\n', r"p.jsonl:2: invalid JSON"),
        ('{"prompt": "ok"}\n\n{"prompt": "  "}\n', r"p.jsonl:3: empty prompt"),
        ('{"text": "ok"}\n', r"p.jsonl:1: expected an object with a 'prompt' field"),
        ('{"prompt": 3}\n', r"p.jsonl:1: prompt must be a string, got int"),
    ],
)
def test_bad_jsonl_names_file_and_line(tmp_path, content, message):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(PromptFileError, match=message):
        read_prompts(path)


def test_missing_file_and_column(tmp_path):
    with pytest.raises(PromptFileError, match="does not exist"):
        read_prompts(tmp_path / "nope.jsonl")
    parquet = tmp_path / "p.parquet"
    pq.write_table(pa.table({"text": ["a"]}), parquet)
    with pytest.raises(PromptFileError, match="no 'prompt' column"):
        read_prompts(parquet)
