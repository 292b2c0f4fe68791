"""Metrics of the RocketMQ 5 API: requests by RPC and status code, connected clients by type,
open Telemetry streams. Registered in the broker's (or NameServer's) registry.

Requests are counted in a plain dict on the event loop and exposed when scraped (a
``prometheus_client`` child's ``inc`` takes a lock and costs more than the count itself)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.broker.v2.status import code_name


class _ClientGauges(Collector):
    def __init__(self, labels: Sequence[tuple[str, str]], counts: Callable[[], dict[str, int]],
                 streams: Callable[[], int]) -> None:
        self._names = [k for k, _ in labels]
        self._values = [v for _, v in labels]
        self._counts = counts
        self._streams = streams

    def collect(self) -> Iterable[GaugeMetricFamily]:
        clients = GaugeMetricFamily("pocketmq_v2_clients", "Connected RocketMQ 5 API clients by type.",
                                    labels=[*self._names, "client_type"])
        for client_type, n in sorted(self._counts().items()):
            clients.add_metric([*self._values, client_type], n)
        yield clients
        streams = GaugeMetricFamily("pocketmq_v2_telemetry_streams", "Open Telemetry streams.",
                                    labels=self._names)
        streams.add_metric(self._values, self._streams())
        yield streams


class _RequestCounts(Collector):
    def __init__(self, labels: Sequence[tuple[str, str]], counts: dict[tuple[str, int], int]) -> None:
        self._names = [k for k, _ in labels]
        self._values = [v for _, v in labels]
        self._counts = counts

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily("pocketmq_v2_requests",
                                     "RocketMQ 5 API requests by RPC and v2 status code.",
                                     labels=[*self._names, "rpc", "code"])
        for (rpc, code), n in sorted(self._counts.copy().items()):  # (copy: atomic under the GIL)
            family.add_metric([*self._values, rpc, code_name(code)], n)
        yield family


class V2Metrics:
    def __init__(self, registry: CollectorRegistry, labels: Sequence[tuple[str, str]] = ()) -> None:
        self.registry = registry
        self._labels = list(labels)
        #: (rpc, v2 code) -> requests answered
        self._counts: dict[tuple[str, int], int] = {}
        registry.register(_RequestCounts(self._labels, self._counts))

    def request(self, rpc: str, code: int) -> None:
        """One answered request (on the event loop)."""
        key = (rpc, code)
        counts = self._counts
        counts[key] = counts.get(key, 0) + 1

    def add_clients(self, counts: Callable[[], dict[str, int]], streams: Callable[[], int]) -> None:
        self.registry.register(_ClientGauges(self._labels, counts, streams))
