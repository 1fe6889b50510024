"""The learner on the driver's side: its actor group, how a step is split over its ranks, why it died."""
