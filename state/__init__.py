"""State: coordinator state and exactly-once user maps."""
