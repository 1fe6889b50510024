"""What the driver (orchestrator/) and the actors (workers/) agree on, imported by both.

Group and sample types (groups.py), the configs the actors read (sampling.py, rollout.py, tools.py,
learning.py), the tokenizer bundle and its fingerprint, user-facing errors, how a user's function
is imported, and which failures mean a dead engine. Modules here import nothing else of the
project (tests/test_architecture.py checks it), and nothing under workers/ imports anything of the
driver but these.
"""
