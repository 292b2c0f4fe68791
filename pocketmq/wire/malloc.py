"""glibc's malloc thresholds for a process that moves large gRPC messages.

gRPC reads a message into 64 KiB buffers allocated on its own threads, that is from glibc's
per-thread arenas. Freeing them there gives the arena's top back to the kernel as soon as more
than ``M_TRIM_THRESHOLD`` (128 KiB by default) is free (``madvise(MADV_DONTNEED)``), so the next
message's buffers fault their pages in again: ~23 page faults per 300 KB pull reply, about half
of a consumer's page faults. glibc raises that threshold by itself only after freeing a chunk it
had ``mmap``-ed, which 64 KiB buffers never are. Fixing both thresholds keeps the freed buffers
for the next message: a few MiB more resident memory per busy thread at most, no faults per
message (docs/architecture.md, "Page faults of large messages").

PocketMQ's own processes (broker, NameServer, the ``pocketmq`` command) call
:func:`keep_freed_memory` at start; an application using the client library may call it too.
The environment decides instead when it names any of glibc's malloc settings.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: ``mallopt`` parameters (<malloc.h>).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Free memory a heap keeps at its top before giving it back to the kernel.
TRIM_THRESHOLD = 16 << 20
#: Allocations from this size up get pages of their own (``mmap``), released when freed.
MMAP_THRESHOLD = 4 << 20
#: Environment variables through which an operator sets glibc's malloc behaviour.
_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")


def keep_freed_memory() -> bool:
    """Set glibc's trim and mmap thresholds (:data:`TRIM_THRESHOLD`, :data:`MMAP_THRESHOLD`) so
    that freed message buffers are reused rather than returned to the kernel and faulted in
    again. Does nothing (returns False) off Linux, on a C library without ``mallopt`` or whose
    ``mallopt`` refuses, or when the environment sets glibc's malloc tunables itself."""
    if not sys.platform.startswith("linux") or any(name in os.environ for name in _ENV):
        return False
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # The mmap threshold first: once either is set, glibc stops adjusting both.
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
