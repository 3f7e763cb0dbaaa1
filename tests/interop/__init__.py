"""Interoperability tests: upstream clients and Apache RocketMQ itself (the oracle) beside ferrymq."""
