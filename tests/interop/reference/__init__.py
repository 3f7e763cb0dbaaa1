"""The Apache RocketMQ reference (the oracle): jars from Maven Central, processes on 127.0.0.1.

Importable from tests (``from interop.reference import ApacheCluster``: pytest puts ``tests/`` on
``sys.path``) and from ``bench/`` after ``sys.path.insert(0, "<repo>/tests")``.
"""

# the NameServer's broker table: ferrymq's LocalCluster waits on it too
from ferrymq.broker.local_cluster import registered_brokers

from .apache import (
    BROKER_MAIN,
    CONTROLLER_MAIN,
    MQADMIN_MAIN,
    NAMESRV_MAIN,
    PROXY_MAIN,
    ROCKETMQ_VERSION,
    ApacheBroker,
    ApacheCluster,
    broker_properties,
    pick_broker_port,
    run_mqadmin,
)
from .java import DEFAULT_JVM_OPTS, JavaProcess, JavaStartError, run_java, start_java
from .targets import TARGETS, Target, ferrymq_cluster
from .tools import APACHE_POM, ToolError, ensure_java_tools, mvn, resolve_classpath

__all__ = [
    "APACHE_POM",
    "BROKER_MAIN",
    "CONTROLLER_MAIN",
    "DEFAULT_JVM_OPTS",
    "MQADMIN_MAIN",
    "NAMESRV_MAIN",
    "PROXY_MAIN",
    "ROCKETMQ_VERSION",
    "TARGETS",
    "ApacheBroker",
    "ApacheCluster",
    "JavaProcess",
    "JavaStartError",
    "Target",
    "ToolError",
    "broker_properties",
    "ensure_java_tools",
    "ferrymq_cluster",
    "mvn",
    "pick_broker_port",
    "registered_brokers",
    "resolve_classpath",
    "run_java",
    "run_mqadmin",
    "start_java",
]
