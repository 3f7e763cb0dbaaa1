"""Kubernetes operator (kopf) for ferrymq NameServer and Broker clusters."""
