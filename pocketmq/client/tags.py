"""Subscription tag expressions as the client takes them (the parsing is the wire package's,
:mod:`pocketmq.wire.tags`, the same the broker uses)."""

from __future__ import annotations

from pocketmq.errors import InvalidArgumentError
from pocketmq.wire.tags import MATCH_ALL, ExpressionError, TagFilter, parse_tag_expression

__all__ = ["MATCH_ALL", "TagFilter", "parse_subscription"]


def parse_subscription(expression: str | None) -> TagFilter:
    """Parse a tag expression; ``None``/``""``/``"*"`` match everything. Raises
    :class:`~pocketmq.errors.InvalidArgumentError` for an expression naming no tag or a tag with
    whitespace inside."""
    try:
        return parse_tag_expression(expression or "*")
    except ExpressionError as exc:
        raise InvalidArgumentError(str(exc)) from None
