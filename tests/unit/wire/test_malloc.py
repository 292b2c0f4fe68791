"""keep_freed_memory: glibc's thresholds fixed so that freed message buffers are reused.

Each case runs in a fresh interpreter: malloc settings are the whole process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# A thread (its own glibc arena, as gRPC's reader threads have) allocates five 64 KiB buffers,
# writes them and frees them, 300 times: a 300 KB message each time. Prints whether
# keep_freed_memory applied and the minor page faults of the loop.
_PROBE = """
import ctypes, json, resource, sys, threading
from pocketmq.wire.malloc import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "1" else False
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
faults = []
def messages():
    def one():
        chunks = [libc.malloc(64 << 10) for _ in range(5)]
        for c in chunks:
            ctypes.memset(c, 1, 64 << 10)
        for c in chunks:
            libc.free(c)
    one()  # the arena's first pages
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(300):
        one()
    faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
t = threading.Thread(target=messages)
t.start()
t.join()
print(json.dumps({"applied": applied, "faults": faults[0]}))
"""


def probe(apply: bool, **env: str) -> dict[str, int]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", _PROBE, "1" if apply else "0"], env={**clean, **env},
                         capture_output=True, text=True, check=True, timeout=60)
    result: dict[str, int] = json.loads(out.stdout)
    return result


def test_freed_buffers_are_reused_instead_of_faulted_in_again() -> None:
    default = probe(apply=False)
    kept = probe(apply=True)
    assert kept["applied"]
    # Without it glibc gives the arena's top back after every message: ~50 pages each time.
    assert default["faults"] > 300 * 20
    assert kept["faults"] < 300


@pytest.mark.parametrize("env", [{"MALLOC_ARENA_MAX": "2"}, {"MALLOC_TRIM_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_the_environment_decides_when_it_names_malloc_settings(env: dict[str, str]) -> None:
    assert not probe(apply=True, **env)["applied"]
