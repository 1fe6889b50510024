"""The rollout pool: prompts become groups, groups go to engines, samples come back as Arrow."""
