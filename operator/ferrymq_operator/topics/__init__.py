"""Topic and ConsumerGroup custom resources (Strimzi Topic-operator style: the resource is the source
of truth on every broker group of its Broker, drift is put back, status says what happened).

``models`` (CRD models), ``plan`` (pure decisions), ``conditions`` (status), ``admin`` (broker admin
calls), ``reconcile`` (the I/O that ties them together); handlers.py registers the kopf handlers.
"""
