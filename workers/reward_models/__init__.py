"""Reward models as TRL's GRPOTrainer runs them (classifier.py), in a Ray actor (actor.py)."""
