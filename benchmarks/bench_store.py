"""Storage engine benchmark: MessageStore appends next to plain-Python file writes.

Two comparisons, each run as alternating rounds in the same process and directory (so both
sides see the same disk, page cache and CPU contention), reporting the median per-round ratio:

(a) ASYNC_FLUSH, one thread calling ``put_message`` in a loop, versus a loop of ``os.write``
    of the same encoded record bytes with no sync (the floor for "write it to the page cache");
    the store runs twice per round: as configured by default (appends into the write buffer,
    committed with ``pwrite``) and with ``transientStorePoolEnable=false`` (appends through the
    mapping).
(b) SYNC_FLUSH, ``--threads`` writer threads each calling ``put_message`` (which returns once
    the record is on disk; group commit shares one fdatasync among them), versus a loop of
    ``os.write`` + ``os.fdatasync`` per message (durable writes without group commit).

Both sides first run once uncounted (``--warmup-seconds``) so neither pays for first-touch
memory alone. Other load on the machine moves these numbers a lot: compare within one run.

Messages have a ``--body-size`` body (1 KiB) and a TAGS property (``--uniq-key`` adds the
UNIQ_KEY property a RocketMQ producer sets). Run ``python benchmarks/bench_store.py`` (about
40 s); every round prints its rates and the CPU this process used per append (all threads);
the last line is ``store_async_ratio=<x> store_sync_ratio=<y> store_async_mapped_ratio=<z>``
(medians of the rounds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time

from services.broker.storage import FlushDiskType, MessageStore, PutMessageStatus, StoreConfig
from services.broker.storage.record import Message, encode_record

TOPIC = "BenchTopic"


def make_message(body_size: int, i: int = 0, uniq_key: bool = False) -> Message:
    properties = {"TAGS": "TagA"}
    if uniq_key:
        properties["UNIQ_KEY"] = f"7F00000100002A9F0000{i:012X}"
    return Message(TOPIC, os.urandom(body_size), i % 4, properties=properties)


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


# -- (a) async ----------------------------------------------------------------------------------

#: CPU seconds (this process, all threads) of the last measured run.
CPU = [0.0]


def ref_write(path: str, record: bytes, seconds: float) -> tuple[int, float]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    write = os.write
    n = 0
    cpu = time.process_time()
    try:
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            for _ in range(1000):
                write(fd, record)
            n += 1000
            now = time.perf_counter()
            if now >= deadline:
                CPU[0] = time.process_time() - cpu
                return n, now - start
    finally:
        os.close(fd)
        os.unlink(path)


def store_async(root: str, msg: Message, seconds: float, pool: bool = True) -> tuple[int, float]:
    config = StoreConfig(store_path_root_dir=root, flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                         transient_store_pool_enable=pool)
    with MessageStore(config) as store:
        assert store.put_message(msg).ok
        time.sleep(0.3)  # let the maintenance thread get ahead (it runs throughout the loop)
        put = store.put_message
        n = 0
        start = time.perf_counter()
        cpu = time.process_time()
        deadline = start + seconds
        while True:
            for _ in range(1000):
                put(msg)
            n += 1000
            now = time.perf_counter()
            if now >= deadline:
                elapsed = now - start
                break
        CPU[0] = time.process_time() - cpu
        ok = store.get_messages(TOPIC, msg.queue_id, store.max_queue_offset(TOPIC, msg.queue_id) - 1, 1)
        assert ok.found and ok.messages[0].body == msg.body
    shutil.rmtree(root, ignore_errors=True)
    return n, elapsed


# -- (b) sync -----------------------------------------------------------------------------------

def ref_write_fdatasync(path: str, record: bytes, seconds: float) -> tuple[int, float]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    cpu = time.process_time()
    try:
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            os.write(fd, record)
            os.fdatasync(fd)
            n += 1
            if n % 16 == 0:
                now = time.perf_counter()
                if now >= deadline:
                    CPU[0] = time.process_time() - cpu
                    return n, now - start
    finally:
        os.close(fd)
        os.unlink(path)


def store_sync(root: str, body_size: int, threads: int, seconds: float, uniq_key: bool) -> tuple[int, float]:
    config = StoreConfig(store_path_root_dir=root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    counts = [0] * threads
    errors: list[str] = []
    with MessageStore(config) as store:
        assert store.put_message(make_message(body_size, 0, uniq_key)).ok
        barrier = threading.Barrier(threads + 1)
        stop = threading.Event()

        def writer(k: int) -> None:
            msg = make_message(body_size, k, uniq_key)
            put = store.put_message
            barrier.wait()
            n = 0
            while not stop.is_set():
                status = put(msg).status
                if status is not PutMessageStatus.PUT_OK:
                    errors.append(status.name)
                    break
                n += 1
            counts[k] = n

        workers = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(threads)]
        for w in workers:
            w.start()
        barrier.wait()
        start = time.perf_counter()
        cpu = time.process_time()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join(30)
        elapsed = time.perf_counter() - start
        CPU[0] = time.process_time() - cpu
    shutil.rmtree(root, ignore_errors=True)
    if errors:
        raise SystemExit(f"sync writers failed: {errors[:3]}")
    return sum(counts), elapsed


# -- main ---------------------------------------------------------------------------------------

def report(label: str, n: int, seconds: float, record_size: int) -> float:
    r = rate(n, seconds)
    print(f"  {label:<44} {r:>11,.0f} appends/s {r * record_size / 1e6:>8.1f} MB/s "
          f"{CPU[0] * 1e6 / max(n, 1):>7.2f} us CPU/append")
    return r


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--body-size", type=int, default=1024, help="message body bytes (default 1024)")
    parser.add_argument("--async-seconds", type=float, default=3.0, help="duration of each async run")
    parser.add_argument("--async-rounds", type=int, default=3, help="alternating ref/store rounds (async)")
    parser.add_argument("--sync-seconds", type=float, default=3.0, help="duration of each sync run")
    parser.add_argument("--sync-rounds", type=int, default=3, help="alternating ref/store rounds (sync)")
    parser.add_argument("--warmup-seconds", type=float, default=1.0,
                        help="uncounted async run of each side first (page cache, allocator, imports)")
    parser.add_argument("--threads", type=int, default=16, help="writer threads for the SYNC_FLUSH run")
    parser.add_argument("--uniq-key", action="store_true", help="add a UNIQ_KEY property to every message")
    parser.add_argument("--dir", default="data/bench",
                        help="parent directory for the temporary files (same disk as the store)")
    args = parser.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench_store-", dir=args.dir)
    try:
        msg = make_message(args.body_size, 0, args.uniq_key)
        record = encode_record(msg, queue_offset=0, physical_offset=0,
                               store_timestamp=int(time.time() * 1000), store_host=("127.0.0.1", 10911))
        size = len(record)
        print(f"record size {size} bytes (body {args.body_size}), dir {work}, {os.cpu_count()} CPUs, "
              f"load average {load()}")

        print("(a) ASYNC_FLUSH, 1 thread, put_message vs os.write loop (no sync)")
        if args.warmup_seconds > 0:
            ref_write(os.path.join(work, "ref.bin"), record, args.warmup_seconds)
            store_async(os.path.join(work, "warmup"), msg, args.warmup_seconds)
        async_ratios = []
        mapped_ratios = []
        for i in range(args.async_rounds):
            ref = report(f"round {i + 1}: os.write", *ref_write(os.path.join(work, "ref.bin"), record,
                                                               args.async_seconds), size)
            got = report(f"round {i + 1}: MessageStore.put_message", *store_async(
                os.path.join(work, f"async{i}"), msg, args.async_seconds), size)
            mapped = report(f"round {i + 1}: put_message, through the mapping", *store_async(
                os.path.join(work, f"mapped{i}"), msg, args.async_seconds, pool=False), size)
            async_ratios.append(got / ref)
            mapped_ratios.append(mapped / ref)
            print(f"  round {i + 1}: ratio {got / ref:.2f} (through the mapping: {mapped / ref:.2f})")

        print(f"(b) SYNC_FLUSH, {args.threads} threads, put_message (group commit) "
              "vs os.write+fdatasync loop")
        sync_ratios = []
        for i in range(args.sync_rounds):
            ref = report(f"round {i + 1}: os.write+fdatasync", *ref_write_fdatasync(
                os.path.join(work, "ref_sync.bin"), record, args.sync_seconds), size)
            got = report(f"round {i + 1}: MessageStore.put_message x{args.threads}", *store_sync(
                os.path.join(work, f"sync{i}"), args.body_size, args.threads, args.sync_seconds,
                args.uniq_key), size)
            sync_ratios.append(got / ref)
            print(f"  round {i + 1}: ratio {got / ref:.2f}")

        a, s = statistics.median(async_ratios), statistics.median(sync_ratios)
        m = statistics.median(mapped_ratios)
        print(f"median ratios: async {a:.2f} (target >= 0.6; through the mapping {m:.2f}), "
              f"sync {s:.2f} (target >= 3.5); load average {load()}")
        print(f"store_async_ratio={a:.2f} store_sync_ratio={s:.2f} store_async_mapped_ratio={m:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
