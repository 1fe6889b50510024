"""The GRPO step loop: groups -> rewards -> advantages -> batch -> learner -> weight sync -> records."""
