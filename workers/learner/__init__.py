"""The learner: TRL's GRPO update on batches the orchestrator assembles, and weight export."""
