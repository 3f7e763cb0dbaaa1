"""PySpark jobs over ferrymq snapshots and store files: backlog analysis and rebalance audit."""
