"""The one vectorised pass over a batch's properties (storage/propscan.py) finds what the
reference parsers find, on arbitrary bytes: the tag code of ``property_value(props, "TAGS")``
and the keys of ``record_keys``, in both layouts (rows of a matrix, or joined)."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.wire.record import property_value, tag_hash_code
from services.broker.storage import propscan
from services.broker.storage.indexkeys import record_keys

# Pieces that make the parser's cases: the names whole, inside other names and values, the
# separators, spaces (several keys), non-ASCII and invalid UTF-8.
_PIECES = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"XTAGS", b"AKEYS", b"\x01", b"\x02", b" ", b"a",
           b"Tag", b"\xc3\xa9", b"\xff", b"T", b"K", b"U", b"7F0000012A9F"]
_piece_runs = st.lists(st.sampled_from(_PIECES), max_size=14).map(b"".join)
_properties = st.one_of(
    _piece_runs,
    st.binary(max_size=40),
    # well-formed pairs, names repeated (the first counts)
    st.lists(st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "A", "XTAGS"]),
                       st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                               max_size=12)), max_size=6)
    .map(lambda pairs: "".join(f"{k}\x01{v}\x02" for k, v in pairs).encode()),
).filter(bool)


def _parse(records: list[bytes], junk: list[bytes], lead: int,
           joined: bool) -> tuple[list[int], list[list[bytes]]]:
    """Tag codes and keys per record of ``records`` laid out in one buffer (``junk[i]`` before
    record ``i``, ``lead`` bytes first), found by the vectorised pass."""
    buf = bytearray(b"\x02\x01K" * (lead // 3))
    starts = []
    for before, props in zip(junk, records, strict=True):
        buf += before
        starts.append(len(buf))
        buf += props
    buf += b"KEYS\x01"  # (what follows the last record is not part of it)
    data = memoryview(bytes(buf))
    with mock.patch.object(propscan, "ROW_WIDTH_MAX", 0 if joined else propscan.ROW_WIDTH_MAX):
        props = propscan.gather(data, np.frombuffer(data, dtype=np.uint8), np.array(starts, dtype=np.int64),
                                np.array([len(r) for r in records], dtype=np.int64))
    n = len(records)
    if not joined and max(map(len, records)) < lead:
        assert isinstance(props.flat.base, np.ndarray)  # (the matrix layout was taken)
    tags = propscan.first_values(props, b"TAGS")
    codes = np.zeros(n, dtype=np.int64)
    codes[tags.rows] = propscan.tag_codes(props, tags)
    keys: list[list[bytes]] = [[] for _ in range(n)]
    spans = propscan.key_spans(props, np.arange(n, dtype=np.int64) * 10)
    if spans is not None:
        assert (np.diff(spans.rows) >= 0).all()
        for row, a, b, several in zip(spans.rows.tolist(), spans.at.tolist(), spans.end.tolist(),
                                      spans.is_keys.tolist(), strict=True):
            value = props.flat[a:b].tobytes()
            keys[row // 10] += [k for k in value.split(b" ") if k] if several else [value]
    return codes.tolist(), keys


def _expected(records: list[bytes]) -> tuple[list[int], list[list[bytes]]]:
    codes = []
    for raw in records:
        tags = property_value(raw, "TAGS")
        codes.append(tag_hash_code(tags) if tags else 0)
    return codes, [record_keys(raw) for raw in records]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_properties, _piece_runs), min_size=1, max_size=12), st.booleans(),
       st.sampled_from([0, 600]))
def test_tags_and_keys_equal_the_reference_parsers(records: list[tuple[bytes, bytes]], joined: bool,
                                                   lead: int) -> None:
    props = [p for p, _ in records]
    codes, keys = _parse(props, [j for _, j in records], lead, joined)
    expected_codes, expected_keys = _expected(props)
    assert codes == expected_codes
    # (a record's KEYS and UNIQ_KEY entries share its offset and time: their order is free)
    assert [sorted(k) for k in keys] == [sorted(k) for k in expected_keys]


def test_long_and_non_ascii_tags_take_the_exact_code() -> None:
    records = [b"TAGS\x01" + b"t" * 200 + b"\x02", "TAGS\x01é\x02".encode(), b"TAGS\x01\xff\xfe\x02",
               b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02", b"A\x01TAGS\x01x\x02TAGS\x01y",
               b"TAGS\x01first\x02TAGS\x01second\x02KEYS\x01k1\x02KEYS\x01k2\x02UNIQ_KEY\x01\x02UNIQ_KEY\x01u"]
    for joined in (True, False):
        assert _parse(records, [b"\x02"] * len(records), 600, joined) == _expected(records)
    assert _expected(records)[0][3] == tag_hash_code("TagA") != 0
