"""The broker's Prometheus metrics (one CollectorRegistry per broker).

Every series carries ``cluster``, ``broker`` and ``broker_id`` labels so one dashboard shows all
broker groups. Counters are incremented once per request with the message count, never once
per message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0)
_IDENT = ("cluster", "broker", "broker_id")


class _GaugeCollector(Collector):
    """Gauges read at scrape time from ``sample()`` -> {name: (help, value)}."""

    def __init__(self, labels: list[str], sample: Callable[[], dict[str, tuple[str, float]]]) -> None:
        self._labels = labels
        self._sample = sample

    def collect(self) -> Iterable[GaugeMetricFamily]:
        for name, (doc, value) in self._sample().items():
            family = GaugeMetricFamily(name, doc, labels=list(_IDENT))
            family.add_metric(self._labels, value)
            yield family


class BrokerMetrics:
    def __init__(self, cluster: str, broker: str, broker_id: int,
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        ident = (cluster, broker, str(broker_id))
        self._ident = list(ident)
        self._put_messages = Counter(
            "pocketmq_broker_put_messages", "Messages received by send requests, by put status.",
            [*_IDENT, "status"], registry=self.registry)
        self._put_requests = Counter(
            "pocketmq_broker_put_requests", "Send requests (single or batch), by put status.",
            [*_IDENT, "status"], registry=self.registry)
        self._put_bytes = Counter(
            "pocketmq_broker_put_bytes", "Message body bytes stored.", _IDENT, registry=self.registry
        ).labels(*ident)
        self._get_messages = Counter(
            "pocketmq_broker_get_messages", "Messages returned by pulls.", _IDENT, registry=self.registry
        ).labels(*ident)
        self._get_requests = Counter(
            "pocketmq_broker_get_requests", "Pull replies, by pull status.", [*_IDENT, "status"],
            registry=self.registry)
        self._put_latency = Histogram(
            "pocketmq_broker_put_latency_seconds", "Send request latency (store + flush/replica wait).",
            _IDENT, buckets=_LATENCY_BUCKETS, registry=self.registry).labels(*ident)
        self._get_latency = Histogram(
            "pocketmq_broker_pull_latency_seconds", "Pull latency, long-poll wait included.",
            _IDENT, buckets=_LATENCY_BUCKETS, registry=self.registry).labels(*ident)
        self._delay_delivered = Counter(
            "pocketmq_broker_delay_delivered_messages", "Delayed messages delivered to their topic.",
            [*_IDENT, "level"], registry=self.registry)
        self._slave_sync = Counter(
            "pocketmq_broker_slave_sync", "Slave metadata sync rounds, by result.",
            [*_IDENT, "result"], registry=self.registry)
        self._put_children: dict[str, tuple[Counter, Counter]] = {}
        self._get_children: dict[str, Counter] = {}
        self.put_total = 0
        self.get_total = 0

    @property
    def ident(self) -> list[str]:
        """Values of the cluster/broker/broker_id labels (for series defined elsewhere)."""
        return list(self._ident)

    def add_gauges(self, sample: Callable[[], dict[str, tuple[str, float]]]) -> None:
        self.registry.register(_GaugeCollector(self._ident, sample))

    def put(self, status: str, messages: int, body_bytes: int, latency_s: float) -> None:
        children = self._put_children.get(status)
        if children is None:
            children = self._put_children[status] = (
                self._put_messages.labels(*self._ident, status),
                self._put_requests.labels(*self._ident, status))
        children[0].inc(messages)
        children[1].inc()
        if body_bytes:
            self._put_bytes.inc(body_bytes)
        self._put_latency.observe(latency_s)
        self.put_total += messages

    def get(self, status: str, messages: int, latency_s: float) -> None:
        child = self._get_children.get(status)
        if child is None:
            child = self._get_children[status] = self._get_requests.labels(*self._ident, status)
        child.inc()
        if messages:
            self._get_messages.inc(messages)
            self.get_total += messages
        self._get_latency.observe(latency_s)

    def delay_delivered(self, level: int, messages: int) -> None:
        self._delay_delivered.labels(*self._ident, str(level)).inc(messages)

    def slave_sync(self, result: str) -> None:
        self._slave_sync.labels(*self._ident, result).inc()
