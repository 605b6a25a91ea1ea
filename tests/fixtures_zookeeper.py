"""pytest fixtures for a real zookeeper server (owned by the zookeeper work)."""
