"""ferrymq: a RocketMQ 4.x compatible message queue (NameServer, Broker, client) in Python."""

__version__ = "0.1.0"
