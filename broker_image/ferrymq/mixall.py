"""Constants broker, NameServer and client share (upstream MixAll and the consumer defaults).

A leaf module: it imports nothing from ferrymq. Topic names and rules: ``ferrymq.topic_validator``.
"""

from __future__ import annotations

__all__ = [
    "CID_RMQ_SYS_PREFIX",
    "DEFAULT_MAX_RECONSUME_TIMES",
    "MASTER_ID",
    "TOOLS_CONSUMER_GROUP",
]

# the brokerId of a master (upstream MixAll.MASTER_ID); slaves have ids >= 1
MASTER_ID = 0
# upstream DefaultMQPushConsumer.maxReconsumeTimes and SubscriptionGroupConfig.retryMaxTimes
DEFAULT_MAX_RECONSUME_TIMES = 16
# the group upstream's admin tools pull with (MixAll.TOOLS_CONSUMER_GROUP); it never commits
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
# the prefix of the broker's own consumer groups (MixAll.CID_RMQ_SYS_PREFIX, isSysConsumerGroup)
CID_RMQ_SYS_PREFIX = "CID_RMQ_SYS_"
