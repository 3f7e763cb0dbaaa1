"""RocketMQ 5 timer messages: the rewrite on put, the delivery service, recall."""
