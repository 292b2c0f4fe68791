"""Subscription tag expressions: ``"*"`` (everything) or ``"a || b"`` (any of the tags).

The parsing is the broker's own (:func:`services.broker.validation.parse_tag_expression`), so a
client never accepts an expression the broker would refuse or reads it differently. The broker
filters by tag hash code; the client re-checks the tag string itself (hash codes collide).
"""

from __future__ import annotations

from pocketmq.errors import InvalidArgumentError
from services.broker.validation import MATCH_ALL, TagFilter, parse_tag_expression
from services.common.errors import InvalidArgumentError as _ServerInvalidArgument

__all__ = ["MATCH_ALL", "TagFilter", "parse_subscription"]


def parse_subscription(expression: str | None) -> TagFilter:
    """Parse a tag expression; ``None``/``""``/``"*"`` match everything. Raises
    :class:`~pocketmq.errors.InvalidArgumentError` for an expression naming no tag or a tag with
    whitespace inside."""
    try:
        return parse_tag_expression(expression or "*")
    except _ServerInvalidArgument as exc:
        raise InvalidArgumentError(str(exc)) from None
