"""Reading one length-delimited field of a serialized protobuf message in place.

A ``PullMessageStream`` reply carries about 256 KiB of records in one ``bytes`` field. Parsed
whole, the protobuf runtime copies them into its message, and reading the field copies them
again; :func:`split_field` finds the field in the serialized bytes instead, so the client parses
only the small rest and decodes the records from where gRPC delivered them. Protobuf's wire
format: each field is a varint key (field number << 3 | wire type) and a value: a varint (type
0), 8 bytes (1), a varint length and that many bytes (2) or 4 bytes (5).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Span", "split_field"]


class Span(NamedTuple):
    """``data[start:end]``, not copied out."""

    data: bytes
    start: int
    end: int

    def tobytes(self) -> bytes:
        return self.data[self.start:self.end]


def _varint(raw: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; ValueError if it does not end in
    ``raw`` or is longer than 10 bytes."""
    value = shift = 0
    while pos < end and shift < 70:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("truncated varint")


def split_field(raw: bytes, number: int) -> tuple[bytes, Span] | None:
    """``raw`` (a serialized message) without its top-level field ``number``, a length-delimited
    field (bytes, string or message), and where that field's value is in ``raw``. None when the
    field is absent or occurs more than once, or ``raw`` is not well-formed at the top level
    (parse it whole then: the protobuf parser keeps the last occurrence or names the fault)."""
    pos = 0
    end = len(raw)
    found: tuple[int, int, int] | None = None
    try:
        while pos < end:
            start = pos
            key, pos = _varint(raw, pos, end)
            wire_type = key & 7
            if wire_type == 0:
                _, pos = _varint(raw, pos, end)
            elif wire_type == 2:
                length, pos = _varint(raw, pos, end)
                if key >> 3 == number:
                    if found is not None:
                        return None
                    found = (start, pos, pos + length)
                pos += length
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            else:  # groups (3, 4) and invalid types
                return None
            if key >> 3 == 0 or pos > end:
                return None
    except ValueError:
        return None
    if found is None:
        return None
    start, value_at, value_end = found
    rest = raw[:start] + raw[value_end:] if value_end < end else raw[:start]
    return rest, Span(raw, value_at, value_end)
