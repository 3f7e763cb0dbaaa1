"""RocketMQ 5 POP consumption on the broker: receipt handles, checkpoints, revive, processors."""
