"""Message index benchmark: what indexing keys costs the store, and how fast a lookup is.

(a) Dispatch throughput with the index on versus off, in alternating rounds of the same run
    (same disk, page cache and CPU contention); each round is a fresh store, warmed up first
    (2,000 messages, or 2 MiB of replicated data: file creation and first page touches are a
    cost per file, not per message):
    - master, batches: ``append_messages`` of ``--batch`` messages (the SendMessageBatch path);
    - master, single: ``append_message`` per message (the SendMessage path);
    - slave: the master's commit log bytes appended with ``append_data`` (as replication does)
      and dispatched by the reput thread.
    Each round also prints the CPU per message of the threads that do the work (for a
    master the appending thread and the index thread; for a slave the copying, writing,
    dispatching and index threads), so a difference can be located.
    A round ends when every message is dispatched and, with the index on, indexed: the
    figure is messages per second including the index catching up. Every message has one
    business key (KEYS) and a unique id (UNIQ_KEY, as RocketMQ producers set it): two index
    entries per message, the costly case.
(b) Lookup latency at ``--entries`` (10M) indexed entries in index files of the default
    geometry (5M hash slots, 20M entries per file). The entries are written through the index
    writer directly (``IndexService._append``, the same vectorised put the dispatcher uses), not
    by 10M real sends, and point at offsets with no commit log behind them: this measures the
    index (hash, slot, chain walk, time filter). A key lookup on a real store (index + reading
    and checking the records from the commit log) is measured on the store of (a).

Run ``python benchmarks/bench_index.py`` (a few minutes: building 10M entries takes most);
the last line is ``index_on_off_batch=<x> index_on_off_single=<y> index_on_off_slave=<z>
lookup_p50_ms=... lookup_p99_ms=... store_query_p99_ms=... entries=... load_before=...
load_after=...`` (1-minute load averages: the machine's other work moves every CPU figure).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import zlib
from collections.abc import Callable

from services.broker.storage import MessageStore, StoreConfig
from services.broker.storage.index import IndexService, key_hash
from services.broker.storage.record import Message

TOPIC = "BenchTopic"
#: The threads of the slave case whose CPU per message is printed: copying the master's log
#: in (main: ``append_data``), writing it, dispatching it (reput), indexing it.
SLAVE_THREADS = ("MainThread", "CommitLogWriter", "ReputMessageService", "IndexService")


def messages(n: int, body_size: int) -> list[Message]:
    body = os.urandom(body_size)
    return [Message(TOPIC, body, i % 4, properties={
        "TAGS": "TagA", "KEYS": f"order-{i}", "UNIQ_KEY": f"7F00000100002A9F0000{i:012X}"}) for i in range(n)]


def store_config(root: str, index: bool) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, message_index_enable=index,
                       mapped_file_size_commit_log=512 * 1024 * 1024)


def wait_caught_up(store: MessageStore, end: int | None = None, timeout: float = 300.0) -> None:
    """Until everything up to ``end`` (default: the end of the log, a record boundary) is
    dispatched and, with the index on, indexed."""
    deadline = time.monotonic() + timeout
    if not store.wait_dispatched(store.max_offset if end is None else end, timeout):
        raise RuntimeError("dispatch did not catch up")
    target = store.dispatched_offset
    index = store.index
    while index is not None and index.indexed_offset < target:
        if time.monotonic() > deadline:
            raise RuntimeError("index did not catch up")
        time.sleep(0.0005)


class Cpu:
    """CPU seconds of this process (every thread) and wall seconds over a ``with`` block."""

    def __enter__(self) -> Cpu:
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu, self.wall = time.process_time() - self.cpu, time.perf_counter() - self.wall


def thread_cpu(ident: int | None) -> float:
    """CPU seconds of one thread of this process (0 for none)."""
    return 0.0 if ident is None else time.clock_gettime(time.pthread_getcpuclockid(ident))


def threads_cpu() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by thread name (threads of one name
    added up)."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            cpu = thread_cpu(thread.ident)
        except (OSError, ProcessLookupError):  # (ended meanwhile)
            continue
        name = thread.name.split("_")[0]  # (pool threads: CommitLogWriter_0 -> CommitLogWriter)
        out[name] = out.get(name, 0.0) + cpu
    return out


def run_master(root: str, index: bool, msgs: list[Message], batch: int,
               warmup: list[Message]) -> tuple[float, float]:
    """(messages per wall second, messages per CPU second) of appending ``msgs``; with the
    index on, also prints the CPU per message of the appending thread and the index thread."""
    with MessageStore(store_config(root, index)) as store:
        store.append_messages(warmup)  # first touch of the files (an index file is made once
        wait_caught_up(store)          # per maxIndexNum entries): not what is measured
        me = threading.get_ident()
        index_thread = store.index._thread if store.index is not None else None
        index_id = index_thread.ident if index_thread is not None else None
        me0, index0 = thread_cpu(me), thread_cpu(index_id)
        with Cpu() as took:
            if batch > 1:
                append = store.append_messages
                for i in range(0, len(msgs), batch):
                    append(msgs[i:i + batch])
            else:
                one = store.append_message
                for m in msgs:
                    one(m)
            wait_caught_up(store)
        me1, index1 = thread_cpu(me), thread_cpu(index_id)
        per = 1e6 / len(msgs)
        print(f"    index {'on ' if index else 'off'}: appending thread {(me1 - me0) * per:.2f} us/msg, "
              f"index thread {(index1 - index0) * per:.2f} us/msg, process {took.cpu * per:.2f} us/msg")
        return len(msgs) / took.wall, len(msgs) / took.cpu


def run_slave(root: str, index: bool, source: MessageStore, count: int, warmup_bytes: int,
              chunk: int = 256 * 1024) -> tuple[float, float]:
    """The same for the master's log replicated into a slave store (``count`` messages in
    all; the first ``warmup_bytes`` are not counted)."""
    with MessageStore(store_config(root, index)) as store:
        offset, end = source.min_offset, source.max_offset
        total = end - offset

        def copy(until: int) -> int:
            at = store.max_offset
            while at < until:
                data = source.get_data(at, chunk)
                if data is None:
                    break
                with data:
                    store.append_data(at, data.data)
                    at = data.end_offset
            return at

        warm_end = copy(offset + warmup_bytes)
        wait_caught_up(store, warm_end - 64 * 1024)  # (a chunk may end inside a record)
        measured_from = store.dispatched_offset
        before = threads_cpu()
        with Cpu() as took:
            copy(end)
            wait_caught_up(store)
        after = threads_cpu()
        n = count * (end - measured_from) / total
        per = 1e6 / n
        used = {name: (cpu - before.get(name, 0.0)) * per for name, cpu in after.items()}
        # (an index thread of the previous round may still be ending: under 0.005 is none)
        threads = ", ".join(f"{name} {us:.2f}" for name, us in sorted(used.items())
                            if name in SLAVE_THREADS and us >= 0.005)
        print(f"    index {'on ' if index else 'off'}: {threads} us/msg, process {took.cpu * per:.2f} us/msg")
        return n / took.wall, n / took.cpu


def rounds(label: str, rounds_n: int, run: Callable[[str, bool], tuple[float, float]], work: str) -> float:
    """Alternating off/on rounds; prints wall and CPU rates, returns the median on/off ratio of
    messages per CPU second (under the GIL a broker's throughput is bounded by its CPU per
    message; unlike wall time it is not moved by other processes on the machine)."""
    ratios = []
    print(f"(a) {label}")
    for r in range(rounds_n):
        got: dict[bool, tuple[float, float]] = {}
        for index in ((False, True) if r % 2 == 0 else (True, False)):
            root = os.path.join(work, f"{label.split()[0]}-{r}-{index}")
            got[index] = run(root, index)
            shutil.rmtree(root, ignore_errors=True)
        ratio = got[True][1] / got[False][1]
        ratios.append(ratio)
        print(f"  round {r + 1}: index off {got[False][0]:>9,.0f} msg/s {got[False][1]:>9,.0f} msg/cpu-s   "
              f"on {got[True][0]:>9,.0f} msg/s {got[True][1]:>9,.0f} msg/cpu-s   "
              f"on/off wall {got[True][0] / got[False][0]:.2f} cpu {ratio:.2f}")
    median = statistics.median(ratios)
    print(f"  median on/off (per CPU second) {median:.2f}")
    return median


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def build_index(work: str, entries: int, chunk: int = 1_000_000) -> IndexService:
    """``entries`` entries ("key-<i>" of TOPIC, one per fake record of 256 bytes, 1000 per
    ms) through the index writer; a hot key owns every 10,000th entry."""
    directory = os.path.join(work, "index10m")
    service = IndexService(directory, 5_000_000, 20_000_000, lambda _o, _n: None, lambda: 0)
    service.load(0, 0)
    prefix = zlib.crc32(TOPIC.encode() + b"#")
    hot = zlib.crc32(b"hot", prefix)
    base_ts = int(time.time() * 1000) - entries // 1000
    started = time.perf_counter()
    for lo in range(0, entries, chunk):
        hi = min(entries, lo + chunk)
        hashes = [zlib.crc32(f"key-{i}".encode(), prefix) if i % 10_000 else hot for i in range(lo, hi)]
        offsets = [i * 256 for i in range(lo, hi)]
        stamps = [base_ts + i // 1000 for i in range(lo, hi)]
        with service._lock:
            service._append(hashes, offsets, stamps)
        print(f"  indexed {hi:>11,} entries ({time.perf_counter() - started:.0f} s)", flush=True)
    return service


def time_lookups(service: IndexService, keys: list[str], limit: int, span: tuple[int, int]) -> list[float]:
    out = []
    for key in keys:
        t = time.perf_counter()
        service.lookup(TOPIC, key, span[0], span[1], limit)
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000,
                        help="messages per dispatch round (short rounds swing)")
    parser.add_argument("--body-size", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7,
                        help="off/on pairs per dispatch case (the median ratio counts)")
    parser.add_argument("--entries", type=int, default=10_000_000, help="entries for the lookup benchmark")
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-index-", dir=args.dir)
    try:
        msgs = messages(args.messages, args.body_size)
        load_before = os.getloadavg()[0]
        print(f"{args.messages} messages of {args.body_size} B, 2 index entries each; dir {work}; "
              f"{os.cpu_count()} CPUs, load {load_before:.1f}")
        warmup = messages(2000, args.body_size)
        batch_ratio = rounds(f"master-batch append_messages x{args.batch}", args.rounds,
                             lambda root, on: run_master(root, on, msgs, args.batch, warmup), work)
        single_ratio = rounds("master-single append_message", args.rounds,
                              lambda root, on: run_master(root, on, msgs, 1, warmup),
                              work)
        source_root = os.path.join(work, "source")
        with MessageStore(store_config(source_root, True)) as source:
            for i in range(0, len(msgs), args.batch):
                source.append_messages(msgs[i:i + args.batch])
            wait_caught_up(source)
            slave_ratio = rounds("slave append_data + reput", args.rounds,
                                 lambda root, on: run_slave(root, on, source, len(msgs), 2 * 1024 * 1024),
                                 work)
            # A key query on a real store: index lookup + reading and checking the records.
            query_ms = []
            for i in random.sample(range(len(msgs)), min(args.lookups, len(msgs))):
                t = time.perf_counter()
                found = source.query_by_key(TOPIC, f"order-{i}")
                query_ms.append((time.perf_counter() - t) * 1000)
                assert len(found) == 1 and found[0].keys == [f"order-{i}"], i
            print(f"(b) store.query_by_key on {len(msgs):,} messages: "
                  f"p50 {percentile(query_ms, 0.5):.3f} ms p99 {percentile(query_ms, 0.99):.3f} ms")
        shutil.rmtree(source_root, ignore_errors=True)

        print(f"(b) lookup latency at {args.entries:,} indexed entries")
        service = build_index(work, args.entries)
        try:
            files = list(service.files())
            size = sum(os.path.getsize(f.path) for f in files)
            print(f"  {len(files)} index file(s), {size / 2**20:,.0f} MiB")
            span = (0, 2**62)
            sample = [f"key-{i}" for i in random.sample(range(1, args.entries), args.lookups) if i % 10_000]
            assert all(service.lookup(TOPIC, k, *span, 64) == [int(k[4:]) * 256] for k in sample[:200])
            hit = time_lookups(service, sample, 64, span)
            miss = time_lookups(service, [f"absent-{i}" for i in range(args.lookups)], 64, span)
            hot = time_lookups(service, ["hot"] * 200, 64, span)
            hot_entries = (args.entries + 9_999) // 10_000
            assert len(service.lookup(TOPIC, "hot", *span, 64)) == min(64, hot_entries)
            rows = (("hit", hit), ("miss", miss), ("hot key (1000 entries, limit 64)", hot))
            for label, values in rows:
                print(f"  {label:<34} p50 {percentile(values, 0.5):.3f} ms  "
                      f"p99 {percentile(values, 0.99):.3f} ms")
            everything = hit + miss + hot
            p50, p99 = percentile(everything, 0.5), percentile(everything, 0.99)
            assert key_hash(TOPIC, "key-1") == zlib.crc32(b"key-1", zlib.crc32(TOPIC.encode() + b"#"))
        finally:
            service.stop()
        load_after = os.getloadavg()[0]
        print(f"load average (1 min) before {load_before:.1f}, after {load_after:.1f}")
        print(f"index_on_off_batch={batch_ratio:.2f} index_on_off_single={single_ratio:.2f} "
              f"index_on_off_slave={slave_ratio:.2f} lookup_p50_ms={p50:.3f} lookup_p99_ms={p99:.3f} "
              f"store_query_p99_ms={percentile(query_ms, 0.99):.3f} entries={args.entries} "
              f"load_before={load_before:.1f} load_after={load_after:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
