"""Driver side of the GRPO system: config, CLI, prompt->group dispatch, batch assembly, records.

Run `python -m orchestrator --help`. Importing this package is cheap: ray, vllm and torch are
imported only by the commands that need them.
"""
