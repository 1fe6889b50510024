"""Placement of rollout engines and the learner onto cluster nodes."""
