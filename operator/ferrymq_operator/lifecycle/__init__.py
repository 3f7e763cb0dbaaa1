"""Lifecycle steps of a Broker reconcile, one module per concern: pausing (the
pause-reconciliation annotation), rolling (health-gated roll-out and the manual rolling restart),
draining (scale-in of broker groups) and namesrv_push (namesrvAddr pushed to running brokers).
The decisions are pure (ferrymq_operator.rollout, ferrymq_operator.drain, pure functions in these
modules); these modules gather the observations and carry the decisions out through k8s.Kube and
the broker admin protocol.

The names below are the package's public surface, re-exported so that ``lifecycle.roll`` and the
like keep working for callers written before the split.
"""

from ferrymq_operator.lifecycle.draining import drain_groups, drain_pending, remove_group
from ferrymq_operator.lifecycle.namesrv_push import push_namesrv_addr, remoting_config_update
from ferrymq_operator.lifecycle.pausing import (
    PAUSE_ANNOTATION,
    RECONCILIATION_PAUSED,
    TRUE_VALUES,
    annotations_of,
    is_paused,
    paused_events,
    paused_status,
    resumed_events,
)
from ferrymq_operator.lifecycle.pods import Events, PortOf, pod_address
from ferrymq_operator.lifecycle.rolling import (
    RESTART_ANNOTATION,
    RESTART_CLOCK_MARGIN_S,
    RolloutOutcome,
    RuntimeInfo,
    SwitchOverCall,
    group_states,
    remoting_runtime_info,
    remoting_switchover,
    restart_requested,
    roll,
    settle_on_delete,
    with_controller,
    with_sync,
)

__all__ = [
    "PAUSE_ANNOTATION",
    "RECONCILIATION_PAUSED",
    "RESTART_ANNOTATION",
    "RESTART_CLOCK_MARGIN_S",
    "TRUE_VALUES",
    "Events",
    "PortOf",
    "RolloutOutcome",
    "RuntimeInfo",
    "SwitchOverCall",
    "annotations_of",
    "drain_groups",
    "drain_pending",
    "group_states",
    "is_paused",
    "paused_events",
    "paused_status",
    "pod_address",
    "push_namesrv_addr",
    "remoting_config_update",
    "remoting_runtime_info",
    "remoting_switchover",
    "remove_group",
    "restart_requested",
    "resumed_events",
    "roll",
    "settle_on_delete",
    "with_controller",
    "with_sync",
]
