"""PySpark Python data sources over the broker's store files (CommitLog, ConsumeQueue)."""
