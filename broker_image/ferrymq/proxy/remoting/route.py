"""A topic route as the remoting port hands it out (upstream ``GetTopicRouteActivity`` with
``ProxyTopicRouteData``): the brokers' names and queues kept, every address (master and slaves)
replaced by the proxy's own, so the client sends everything to the proxy and names the broker
group in the request. Pure."""

from __future__ import annotations

from ferrymq.remoting import bodies


def proxied_route(route: bodies.TopicRouteData, proxy_addr: str) -> bodies.TopicRouteData:
    return bodies.TopicRouteData(
        order_topic_conf=route.order_topic_conf,
        queue_datas=[q.model_copy() for q in route.queue_datas],
        broker_datas=[
            bodies.BrokerData(
                cluster=b.cluster,
                broker_name=b.broker_name,
                broker_addrs={broker_id: proxy_addr for broker_id in b.broker_addrs},
            )
            for b in route.broker_datas
        ],
    )
