"""The storage engine: CommitLog, ConsumeQueue, IndexFile, checkpoint, flush, recovery."""
