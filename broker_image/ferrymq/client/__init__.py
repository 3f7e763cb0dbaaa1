"""ferrymq Python client SDK: producer, push/pull consumers and admin client (RocketMQ 4.x protocol)."""
