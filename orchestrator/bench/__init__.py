"""`python -m orchestrator bench`: our pool and trainer measured beside raw vLLM, HF and TRL."""
