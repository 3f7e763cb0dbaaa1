"""Broker: processors, metadata managers, registration, long polling and wiring."""
