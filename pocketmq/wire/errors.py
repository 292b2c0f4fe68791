"""Errors of the wire package. Each is a ``ValueError`` whose text names the offending value."""

from __future__ import annotations


class WireError(ValueError):
    """Base of the wire package's errors."""


class RecordError(WireError):
    """A message that cannot be encoded, or bytes that are not a valid record."""


class AddressError(WireError):
    """Text that is not a ``host:port`` address."""


class InvalidPortError(AddressError):
    """A ``host:port`` whose port is not a number in the allowed range."""


class InvalidNameError(WireError):
    """A topic or group name that breaks RocketMQ's naming rules."""


class ExpressionError(WireError):
    """A subscription (tag) expression that cannot be parsed."""
