"""The NameServer's Prometheus metrics (one CollectorRegistry per NameServer instance).

Everything here is updated from the event loop; prometheus_client's metric objects are
thread-safe, so the metrics HTTP thread may read them at any time.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class NamesrvMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.live_brokers = Gauge(
            "pocketmq_namesrv_live_brokers", "Registered (live) broker processes per cluster",
            ["cluster"], registry=r,
        )
        self.topics = Gauge("pocketmq_namesrv_topics", "Topics with at least one route", registry=r)
        self.registrations = Counter(
            "pocketmq_namesrv_registrations", "RegisterBroker calls applied (heartbeats included)",
            ["kind"], registry=r,
        )
        self.topic_updates = Counter(
            "pocketmq_namesrv_topic_config_updates", "Registrations whose topic table was read", registry=r,
        )
        self.expirations = Counter(
            "pocketmq_namesrv_broker_expirations", "Brokers removed for not registering in time", registry=r,
        )
        self.unregistrations = Counter(
            "pocketmq_namesrv_broker_unregistrations", "Brokers removed by UnregisterBroker", registry=r,
        )
        self.route_queries = Counter(
            "pocketmq_namesrv_route_queries", "GetRouteInfoByTopic calls by result", ["result"], registry=r,
        )
        self.requests = Counter(
            "pocketmq_namesrv_requests", "gRPC requests by method and status code", ["method", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "pocketmq_namesrv_request_duration_seconds", "gRPC request handling time by method",
            ["method"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.routes_found = self.route_queries.labels("found")
        self.routes_not_found = self.route_queries.labels("not_found")
        self._clusters: set[str] = set()
        self._per_method: dict[str, tuple[Histogram, dict[str, Counter]]] = {}

    def observe_request(self, method: str, code: str, seconds: float) -> None:
        """Record one gRPC call (label children are looked up once per method and code)."""
        entry = self._per_method.get(method)
        if entry is None:
            entry = self._per_method[method] = (self.latency.labels(method), {})
        histogram, counters = entry
        histogram.observe(seconds)
        counter = counters.get(code)
        if counter is None:
            counter = counters[code] = self.requests.labels(method, code)
        counter.inc()

    def set_live_brokers(self, per_cluster: dict[str, int]) -> None:
        for gone in self._clusters - set(per_cluster):
            self.live_brokers.remove(gone)
        for cluster, count in per_cluster.items():
            self.live_brokers.labels(cluster).set(count)
        self._clusters = set(per_cluster)
