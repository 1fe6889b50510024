"""Prompt sources: files users give (jsonl, parquet) and the built-in task's stream."""
