"""Moving the learner's weights into every rollout engine: packed buckets and their transports."""
