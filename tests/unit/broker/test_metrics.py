from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.broker.metrics import BrokerMetrics
from services.broker.v2.metrics import V2Metrics
from services.broker.v2.status import Code

IDENT = {"cluster": "c1", "broker": "broker-a", "broker_id": "0"}


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({**IDENT, **labels}.items()))


def test_put_and_get_counts_and_latency_histograms_are_exposed() -> None:
    m = BrokerMetrics("c1", "broker-a", 0)
    m.put("PUT_OK", 32, 32 * 1024, 0.0004)
    m.put("PUT_OK", 1, 100, 0.003)
    m.put("MESSAGE_ILLEGAL", 1, 0, 40.0)
    m.get("FOUND", 7, 0.0005)
    m.get("NO_NEW_MSG", 0, 2.0)
    s = samples(m.registry)
    assert s[key("pocketmq_broker_put_messages_total", status="PUT_OK")] == 33
    assert s[key("pocketmq_broker_put_messages_total", status="MESSAGE_ILLEGAL")] == 1
    assert s[key("pocketmq_broker_put_requests_total", status="PUT_OK")] == 2
    assert s[key("pocketmq_broker_put_bytes_total")] == 32 * 1024 + 100
    assert s[key("pocketmq_broker_get_messages_total")] == 7
    assert s[key("pocketmq_broker_get_requests_total", status="NO_NEW_MSG")] == 1
    assert (m.put_total, m.get_total) == (34, 7)
    # Buckets are cumulative "le" counts; a bound itself falls in its bucket; 40 s only in +Inf.
    put = "pocketmq_broker_put_latency_seconds_bucket"
    assert s[key(put, le="0.0005")] == 1
    assert s[key(put, le="0.0025")] == 1
    assert s[key(put, le="0.005")] == 2
    assert s[key(put, le="30.0")] == 2
    assert s[key(put, le="+Inf")] == 3
    assert s[key("pocketmq_broker_put_latency_seconds_count")] == 3
    assert abs(s[key("pocketmq_broker_put_latency_seconds_sum")] - 40.0034) < 1e-9
    pull = "pocketmq_broker_pull_latency_seconds_bucket"
    assert s[key(pull, le="0.0005")] == 1
    assert s[key(pull, le="1.0")] == 1
    assert s[key(pull, le="2.5")] == 2


def test_v2_requests_are_counted_by_rpc_and_code_name() -> None:
    registry = CollectorRegistry()
    m = V2Metrics(registry, list(IDENT.items()))
    m.request("SendMessage", Code.OK)
    m.request("SendMessage", Code.OK)
    m.request("SendMessage", Code.TOPIC_NOT_FOUND)
    s = samples(registry)
    assert s[key("pocketmq_v2_requests_total", rpc="SendMessage", code="OK")] == 2
    assert s[key("pocketmq_v2_requests_total", rpc="SendMessage", code="TOPIC_NOT_FOUND")] == 1
