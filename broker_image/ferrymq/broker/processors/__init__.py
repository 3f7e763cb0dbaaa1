"""Broker request processors: one module per family of request codes (upstream broker/processor)."""
