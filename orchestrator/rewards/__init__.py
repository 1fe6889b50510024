"""Rewards: the reward functions and their calls (functions.py), the reward models' workers (models.py),
and a step's reward tasks, started as groups come back and merged in request order (scoring.py)."""
