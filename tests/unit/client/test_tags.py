from __future__ import annotations

import pytest

from pocketmq.client.tags import parse_subscription
from pocketmq.errors import InvalidArgumentError


@pytest.mark.parametrize("expr", [None, "", "*", "  *  ", "a || *"])
def test_match_all(expr: str | None) -> None:
    f = parse_subscription(expr)
    assert f.matches_all and f.matches("anything") and f.matches("")


def test_or_expression() -> None:
    f = parse_subscription("a || b||c")
    assert f.tags == frozenset({"a", "b", "c"})
    assert f.matches("a") and f.matches("c") and not f.matches("d") and not f.matches("")


@pytest.mark.parametrize("expr", ["||", " || ", "a b"])
def test_invalid(expr: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_subscription(expr)


def test_same_parser_as_the_broker() -> None:
    from services.broker.validation import parse_tag_expression

    assert parse_subscription("x || y") == parse_tag_expression("x || y")
