"""LLM judges: frozen models that reward functions ask, each served by an engine pool of its own
(pools.py), reached through a router actor (router.py) by a client in the reward task (client.py)."""
