"""Subscription tag expressions: ``"*"`` (everything) or ``"a || b"`` (any of the tags).

The broker filters by tag hash code; the client re-checks the tag string itself (hash codes
collide), so both parse expressions here and never read one differently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pocketmq.wire.errors import ExpressionError
from pocketmq.wire.record import tag_hash_code

__all__ = ["MATCH_ALL", "ExpressionError", "TagFilter", "parse_tag_expression"]


@dataclasses.dataclass(frozen=True)
class TagFilter:
    """A parsed subscription expression: ``None`` tags = everything (``*``)."""

    expression: str
    tags: frozenset[str] | None
    hash_codes: frozenset[int] | None

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def matches(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)


MATCH_ALL = TagFilter("*", None, None)


def parse_tag_expression(expression: str, hash_code: Callable[[str], int] = tag_hash_code) -> TagFilter:
    """``"*"``/``""`` -> everything; ``"a || b"`` -> tags a and b (RocketMQ's TAG syntax).

    Empty alternatives (``"a || "``) are ignored; an expression with no tag at all, or a tag
    with whitespace inside, raises :class:`ExpressionError`.
    """
    text = expression.strip()
    if text in ("", "*"):
        return MATCH_ALL
    tags = [part.strip() for part in text.split("||")]
    tags = [t for t in tags if t]
    if not tags:
        raise ExpressionError(f"subscription expression {expression!r} names no tag")
    for tag in tags:
        if tag == "*":
            return MATCH_ALL
        if any(c.isspace() for c in tag):
            raise ExpressionError(
                f"subscription expression {expression!r}: tag {tag!r} contains whitespace "
                "(separate tags with ||)"
            )
    unique = frozenset(tags)
    return TagFilter(text, unique, frozenset(hash_code(t) for t in unique))
