"""Controller mode (upstream RocketMQ 5.x ``controller/``): a controller keeps each broker group's
SyncStateSet and master epoch, elects a new master from the in-sync replicas when the master stops
heartbeating, and brokers switch role at run time.

- :mod:`~ferrymq.controller.decisions`: the pure decisions (who is in sync, whom to elect, which
  epoch, is a registration acceptable);
- :mod:`~ferrymq.controller.state`: the controller's state and its file store;
- :mod:`~ferrymq.controller.server`: the ``ferrymq controller`` process (RocketMQ remoting);
- :mod:`~ferrymq.controller.protocol`: request/response codes and the wire shapes both ends share.
"""
