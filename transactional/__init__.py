"""spark-trident: Storm's transactional topologies on PySpark (engine package)."""
