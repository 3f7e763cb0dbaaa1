"""Spark jobs: DataFrame -> DataFrame transforms plus a ``run`` that writes Parquet, JSON and HTML."""
