"""Constants broker, NameServer and client share (upstream MixAll and the consumer defaults).

A leaf module: it imports nothing from ferrymq. Topic names and rules: ``ferrymq.topic_validator``.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_RECONSUME_TIMES", "MASTER_ID"]

# the brokerId of a master (upstream MixAll.MASTER_ID); slaves have ids >= 1
MASTER_ID = 0
# upstream DefaultMQPushConsumer.maxReconsumeTimes and SubscriptionGroupConfig.retryMaxTimes
DEFAULT_MAX_RECONSUME_TIMES = 16
