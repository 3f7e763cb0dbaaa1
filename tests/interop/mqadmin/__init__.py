"""The differential mqadmin suite: mqadmin 5.4.0 and 4.9.8 against Apache RocketMQ and ferrymq."""
