"""pytest fixtures for a real redis server (owned by the redis work)."""
