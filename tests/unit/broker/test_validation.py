from __future__ import annotations

import pytest

from services.broker import validation as v
from services.broker.config import parse_delay_levels
from services.broker.storage.record import tag_hash_code
from services.common.config import ConfigError
from services.common.errors import InvalidArgumentError


@pytest.mark.parametrize("name", ["a", "TopicTest", "t_1-2", "%RETRY%group", "a|b", "x" * 127])
def test_legal_topics(name: str) -> None:
    assert v.validate_topic(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("a b", "illegal characters"),
        ("topic/1", "illegal characters"),
        ("tópico", "illegal characters"),
        ("a.b", "illegal characters"),
        ("x" * 128, "128 characters long (at most 127)"),
    ],
)
def test_illegal_topics(name: str, fragment: str) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        v.validate_topic(name)


def test_system_topics_refused_for_send() -> None:
    assert v.validate_topic(v.SCHEDULE_TOPIC)
    with pytest.raises(InvalidArgumentError, match="system topic"):
        v.validate_send_topic(v.SCHEDULE_TOPIC)
    with pytest.raises(InvalidArgumentError, match="system topic"):
        v.validate_send_topic("TBW102")


def test_group_names() -> None:
    assert v.validate_group("g" * 255)
    with pytest.raises(InvalidArgumentError, match="at most 255"):
        v.validate_group("g" * 256)
    with pytest.raises(InvalidArgumentError, match="illegal"):
        v.validate_group("my group")


def test_perm_and_queue_nums() -> None:
    assert v.validate_perm(6) == 6
    for bad in (0, 8, -1):
        with pytest.raises(InvalidArgumentError, match="perm"):
            v.validate_perm(bad)
    v.validate_queue_nums(1, 1024)
    with pytest.raises(InvalidArgumentError, match="read_queue_nums"):
        v.validate_queue_nums(0, 4)
    with pytest.raises(InvalidArgumentError, match="write_queue_nums"):
        v.validate_queue_nums(4, 1025)
    assert v.perm_to_string(6) == "RW-"


def test_negative_offset() -> None:
    with pytest.raises(InvalidArgumentError, match=">= 0, got -1"):
        v.validate_offset(-1)


@pytest.mark.parametrize("expr", ["", "*", "  *  ", "a || *"])
def test_tag_expression_all(expr: str) -> None:
    f = v.parse_tag_expression(expr)
    assert f.matches_all and f.matches(None) and f.matches("anything")


def test_tag_expression_tags() -> None:
    f = v.parse_tag_expression(" TagA ||TagB|| ")
    assert f.tags == {"TagA", "TagB"}
    assert f.hash_codes == {tag_hash_code("TagA"), tag_hash_code("TagB")}
    assert f.matches("TagA") and not f.matches("TagC") and not f.matches(None)


@pytest.mark.parametrize("expr", ["||", " || || ", "a b"])
def test_tag_expression_errors(expr: str) -> None:
    with pytest.raises(InvalidArgumentError, match="subscription expression"):
        v.parse_tag_expression(expr)


def test_delay_levels() -> None:
    levels = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert len(levels) == 18
    assert levels[0] == 1000 and levels[4] == 60_000 and levels[-1] == 7_200_000
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        parse_delay_levels("1s 5x")
    with pytest.raises(ConfigError, match="at least one"):
        parse_delay_levels("  ")


def test_effective_delay_level() -> None:
    assert v.effective_delay_level(0, 18) == 0
    assert v.effective_delay_level(3, 18) == 3
    assert v.effective_delay_level(99, 18) == 18
    with pytest.raises(InvalidArgumentError, match="delay level"):
        v.effective_delay_level(-1, 18)


@pytest.mark.parametrize(
    ("key", "value"),
    [("brokerClusterName", "my cluster"), ("brokerClusterName", ""), ("brokerName", "b" * 128),
     ("brokerName", "a/b")],
)
def test_broker_config_refuses_names_the_namesrv_would_refuse(key: str, value: str) -> None:
    from services.broker.config import BrokerConfig
    from services.namesrv.validation import check_name

    field = "cluster_name" if key == "brokerClusterName" else "broker_name"
    with pytest.raises(InvalidArgumentError):
        check_name(field, value)
    with pytest.raises(ConfigError, match=key):
        BrokerConfig(**{"broker_cluster_name" if field == "cluster_name" else "broker_name": value})
