"""pytest fixtures for a real kafka server (owned by the kafka work)."""
