"""A produce batch whose messages differ only in their bodies, encoded in bulk.

Most batches a producer sends are of one topic and one queue, with one producer group and no
per-message tags, keys or properties (:meth:`SendService.send_batch` checks). Their records share
every header field but TOTALSIZE, BODYCRC, QUEUEOFFSET, PHYSICALOFFSET and BODYLENGTH, and the
same tail (topic and properties). :class:`UniformBatch` holds such a batch as columns (one list of
bodies, NumPy arrays of their lengths, sizes and CRCs) and :func:`encode_uniform` makes the
records of the whole batch at once: one template header repeated, the varying fields written as
columns, and one ``bytes.join`` of headers, bodies and tails. No Python object per message
beyond the body the request already holds. The commit log appends it with
:meth:`~services.broker.storage.commitlog.CommitLog.append_uniform`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from services.broker.storage.consumequeue import ENTRY
from services.broker.storage.dispatch import ENTRY_DTYPE, HEADER_DTYPE
from services.broker.storage.record import (
    HEADER,
    HEADER_SIZE,
    MAGIC_CODE,
    PreparedRecord,
    RecordError,
    body_crc,
    host_bytes,
)

I64Array = npt.NDArray[np.int64]

_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1


class UniformBatch(NamedTuple):
    """Records of one topic and queue that share everything but their bodies (see module doc)."""

    topic: str
    queue_id: int
    bodies: Sequence[bytes]
    #: TOPICLENGTH · TOPIC · PROPERTIESLENGTH · PROPERTIES of every record.
    tail: bytes
    tags_code: int
    flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    body_lengths: list[int]
    body_crcs: list[int]
    #: TOTALSIZE of every record when the bodies are all of one length, else 0.
    same_size: int
    #: Bytes of all the records.
    total: int
    #: The largest record's size.
    max_size: int

    def __len__(self) -> int:
        return len(self.bodies)

    def sizes(self) -> I64Array:
        """TOTALSIZE of each record."""
        if self.same_size:
            return np.full(len(self.bodies), self.same_size, dtype=np.int64)
        return np.array(self.body_lengths, dtype=np.int64) + (HEADER_SIZE + len(self.tail))


def uniform_batch(
    topic: str, queue_id: int, bodies: Sequence[bytes], tail: bytes, tags_code: int, flag: int,
    born_timestamp: int, born_host: tuple[str, int], lengths: list[int] | None = None,
) -> UniformBatch:
    """The batch of ``bodies`` (bytes, at least one) for :func:`encode_uniform`: their sizes and
    CRCs computed, every shared header field range-checked (:class:`RecordError` otherwise: the
    columns are fixed-width, nothing may wrap). ``tail, tags_code`` as
    :func:`~services.broker.storage.record.encode_tail` returns them; ``lengths``: the bodies'
    lengths if the caller has them."""
    n = len(bodies)
    if not n:
        raise RecordError("a batch needs at least one message")
    if not 0 <= queue_id <= _I32_MAX:
        raise RecordError(f"queue id {queue_id} is out of range")
    if not -_I32_MAX - 1 <= flag <= _I32_MAX:
        raise RecordError(f"flag {flag} is out of range")
    if not 0 <= born_timestamp <= _I64_MAX:
        raise RecordError(f"born timestamp {born_timestamp} is out of range")
    born_ip = host_bytes(born_host[0])
    born_port = born_host[1]
    if not -_I32_MAX - 1 <= born_port <= _I32_MAX:
        raise RecordError(f"born port {born_port} is out of range")
    if lengths is None:
        lengths = list(map(len, bodies))
    crcs = list(map(body_crc, bodies))
    extra = HEADER_SIZE + len(tail)
    longest = max(lengths)
    max_size = longest + extra
    if max_size > _I32_MAX:
        raise RecordError(f"a record of {max_size} bytes is larger than the format allows")
    same = max_size if min(lengths) == longest else 0
    total = same * n if same else sum(lengths) + extra * n
    return UniformBatch(topic, queue_id, bodies, tail, tags_code, flag, born_timestamp, born_ip, born_port,
                        lengths, crcs, same, total, max_size)


def encode_uniform(
    batch: UniformBatch, first_queue_offset: int, physical_offset: int, store_timestamp: int,
    store_ip: bytes, store_port: int,
) -> tuple[bytes | bytearray, I64Array]:
    """The batch's records back to back, record ``i`` with queue offset ``first_queue_offset +
    i`` at ``physical_offset`` + the sizes before it; and those physical offsets. The same bytes
    :func:`~services.broker.storage.record.encode_batch` makes of the batch's prepared records.
    Raises :class:`RecordError` if an offset does not fit its field."""
    n = len(batch.bodies)
    if first_queue_offset < 0 or first_queue_offset + n > _I64_MAX or physical_offset < 0 \
            or physical_offset + batch.total > _I64_MAX:
        raise RecordError("a queue or commit log offset is out of range")
    # One header with the shared fields (the varying ones are overwritten below), n times.
    template = HEADER.pack(
        batch.same_size, MAGIC_CODE, 0, batch.queue_id, batch.flag, 0, 0, 0,
        batch.born_timestamp or store_timestamp, batch.born_ip, batch.born_port, store_timestamp,
        store_ip, store_port, 0, 0, batch.body_lengths[0])
    if batch.same_size:
        # Records of one size: template · body · tail · template · ... · tail joined into one
        # buffer, then the varying fields written through a view of its headers (stride: the
        # record size). No object per message.
        size = batch.same_size
        parts: list[bytes] = [batch.tail + template] * (2 * n + 1)
        parts[0] = template
        parts[1::2] = batch.bodies
        parts[-1] = batch.tail
        buffer = bytearray().join(parts)
        view = np.ndarray((n,), dtype=HEADER_DTYPE, buffer=buffer, strides=(size,))
        view["body_crc"] = batch.body_crcs
        view["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + n, dtype=np.int64)
        offsets = np.arange(physical_offset, physical_offset + batch.total, size, dtype=np.int64)
        view["physical_offset"] = offsets
        return buffer, offsets
    # Bodies of different lengths: the headers as one array, cut and joined with the bodies.
    headers = np.frombuffer(bytearray(template * n), dtype=HEADER_DTYPE)
    sizes = batch.sizes()
    offsets = np.cumsum(sizes)
    offsets -= sizes
    offsets += physical_offset
    headers["total_size"] = sizes
    headers["body_length"] = batch.body_lengths
    headers["body_crc"] = batch.body_crcs
    headers["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + n, dtype=np.int64)
    headers["physical_offset"] = offsets
    raw = headers.tobytes()
    pieces: list[bytes] = [batch.tail] * (3 * n)
    pieces[0::3] = [raw[i:i + HEADER_SIZE] for i in range(0, n * HEADER_SIZE, HEADER_SIZE)]
    pieces[1::3] = batch.bodies
    return b"".join(pieces), offsets


def queue_entries(batch: UniformBatch, physical_offsets: I64Array) -> bytes:
    """The consume queue entries of the batch's records, stored at ``physical_offsets``."""
    n = len(batch.bodies)
    entries = np.frombuffer(bytearray(ENTRY.pack(0, batch.same_size, batch.tags_code) * n), dtype=ENTRY_DTYPE)
    entries["offset"] = physical_offsets
    if not batch.same_size:
        entries["size"] = batch.sizes()
    return entries.tobytes()


def prepared_records(batch: UniformBatch) -> list[PreparedRecord]:
    """The batch as prepared records (for :meth:`CommitLog.append_batch`, which splits a batch
    over segments)."""
    extra = HEADER_SIZE + len(batch.tail)
    return [
        PreparedRecord(length + extra, batch.topic, batch.queue_id, body, batch.tail, crc, batch.flag, 0,
                       batch.born_timestamp, batch.born_ip, batch.born_port, 0, 0, batch.tags_code)
        for body, length, crc in zip(batch.bodies, batch.body_lengths, batch.body_crcs, strict=True)
    ]
