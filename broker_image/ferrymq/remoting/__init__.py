"""RocketMQ 4.x remoting: frame codec, commands, codes, and the asyncio server and client."""
