"""disque_spark: the PySpark pipeline that ingests the Disque per-worker stats log."""

__version__ = "0.1.0"
