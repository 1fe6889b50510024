"""A rollout worker: one vLLM engine, the canonical tokenizer, and sampling that does what was asked."""
