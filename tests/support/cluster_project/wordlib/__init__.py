"""A local package of the cluster test's project: executors import it from the shipped zip."""
