"""The broker's Prometheus metrics (one CollectorRegistry per broker).

Every series carries ``cluster``, ``broker`` and ``broker_id`` labels so one dashboard shows all
broker groups. Counters are incremented once per request with the message count, never once
per message.

The produce and pull figures are counted per request on the event loop: they are plain Python
numbers (:class:`_RequestStats`) turned into Prometheus families when scraped, not
``prometheus_client`` children, whose lock and bookkeeping per ``inc``/``observe`` cost several
times the rest of a metrics update.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
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


class _RequestStats:
    """Requests and messages by status, body bytes and a latency histogram of one request kind,
    updated by one thread (the event loop) and read at scrape time."""

    def __init__(self) -> None:
        #: status -> [messages, requests]
        self.by_status: dict[str, list[int]] = {}
        self.bytes = 0
        self.latency_counts = [0] * (len(_LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.latency_sum = 0.0

    def count(self, status: str, messages: int, body_bytes: int, latency_s: float) -> None:
        counts = self.by_status.get(status)
        if counts is None:
            counts = self.by_status[status] = [0, 0]
        counts[0] += messages
        counts[1] += 1
        self.bytes += body_bytes
        self.latency_counts[bisect_left(_LATENCY_BUCKETS, latency_s)] += 1
        self.latency_sum += latency_s

    def histogram(self, name: str, doc: str, ident: list[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=list(_IDENT))
        buckets = []
        total = 0
        for bound, n in zip((*_LATENCY_BUCKETS, None), list(self.latency_counts), strict=True):
            total += n
            buckets.append(("+Inf" if bound is None else repr(float(bound)), total))
        family.add_metric(ident, buckets, self.latency_sum)
        return family


class _RequestCollector(Collector):
    """The put and get families of :class:`BrokerMetrics`, built at scrape time."""

    def __init__(self, ident: list[str], put: _RequestStats, get: _RequestStats) -> None:
        self._ident = ident
        self._put = put
        self._get = get

    def collect(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        ident, put, get = self._ident, self._put, self._get
        by_status = [*_IDENT, "status"]
        messages = CounterMetricFamily("pocketmq_broker_put_messages",
                                       "Messages received by send requests, by put status.", labels=by_status)
        requests = CounterMetricFamily("pocketmq_broker_put_requests",
                                       "Send requests (single or batch), by put status.", labels=by_status)
        for status, (n_messages, n_requests) in sorted(put.by_status.copy().items()):
            messages.add_metric([*ident, status], n_messages)
            requests.add_metric([*ident, status], n_requests)
        yield messages
        yield requests
        yield _single("pocketmq_broker_put_bytes", "Message body bytes stored.", ident, put.bytes)
        yield _single("pocketmq_broker_get_messages", "Messages returned by pulls.", ident,
                      sum(n for n, _ in get.by_status.copy().values()))
        pulls = CounterMetricFamily("pocketmq_broker_get_requests", "Pull replies, by pull status.",
                                    labels=by_status)
        for status, (_, n_requests) in sorted(get.by_status.copy().items()):
            pulls.add_metric([*ident, status], n_requests)
        yield pulls
        yield put.histogram("pocketmq_broker_put_latency_seconds",
                            "Send request latency (store + flush/replica wait).", ident)
        yield get.histogram("pocketmq_broker_pull_latency_seconds",
                            "Pull latency, long-poll wait included.", ident)


def _single(name: str, doc: str, ident: list[str], value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=list(_IDENT))
    family.add_metric(ident, value)
    return family


class BrokerMetrics:
    def __init__(self, cluster: str, broker: str, broker_id: int,
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        ident = (cluster, broker, str(broker_id))
        self._ident = list(ident)
        self._put = _RequestStats()
        self._get = _RequestStats()
        self.registry.register(_RequestCollector(self._ident, self._put, self._get))
        self._delay_delivered = Counter(
            "pocketmq_broker_delay_delivered_messages", "Delayed messages delivered to their topic.",
            [*_IDENT, "level"], registry=self.registry)
        self._slave_sync = Counter(
            "pocketmq_broker_slave_sync", "Slave metadata sync rounds, by result.",
            [*_IDENT, "result"], registry=self.registry)
        self.put_total = 0
        self.get_total = 0

    @property
    def ident(self) -> list[str]:
        """Values of the cluster/broker/broker_id labels (for series defined elsewhere)."""
        return list(self._ident)

    def add_gauges(self, sample: Callable[[], dict[str, tuple[str, float]]]) -> None:
        self.registry.register(_GaugeCollector(self._ident, sample))

    def put(self, status: str, messages: int, body_bytes: int, latency_s: float) -> None:
        """One send request (on the event loop)."""
        self._put.count(status, messages, body_bytes, latency_s)
        self.put_total += messages

    def get(self, status: str, messages: int, latency_s: float) -> None:
        """One pull reply (on the event loop)."""
        self._get.count(status, messages, 0, latency_s)
        self.get_total += messages

    def delay_delivered(self, level: int, messages: int) -> None:
        self._delay_delivered.labels(*self._ident, str(level)).inc(messages)

    def slave_sync(self, result: str) -> None:
        self._slave_sync.labels(*self._ident, result).inc()
