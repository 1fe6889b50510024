"""Ray actors and the plain classes inside them: rollout engines (vLLM) and the learner (TRL)."""
