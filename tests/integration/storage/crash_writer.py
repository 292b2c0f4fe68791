"""Child process of ``test_crash``: opens a store in SYNC_FLUSH and writes until killed.

``python -m tests.integration.storage.crash_writer ROOT SECONDS FIRST_INDEX``

Prints ``READY`` once started, then one line ``index queue_id queue_offset physical_offset`` per
message *after* its put returned PUT_OK (i.e. acknowledged as flushed; with ``CRASH_FLUSH=ASYNC_FLUSH``
in the environment the store runs ASYNC_FLUSH: acknowledged as written), flushing stdout each
time. It never shuts the store down: the parent SIGKILLs it (it exits by itself after SECONDS).

``python -m tests.integration.storage.crash_writer --replica ROOT SOURCE``: a slave-like store at
ROOT copies SOURCE's whole commit log with ``append_data``, dispatches about half of it, waits
for a checkpoint, prints ``READY <max offset> <dispatched offset>`` and waits to be SIGKILLed
mid-dispatch.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from services.broker.storage import FlushDiskType, MessageStore, PutMessageStatus, StoreConfig
from services.broker.storage.record import Message

TOPIC = "CrashTopic"
QUEUES = 4
WRITERS = 4


def config(root: str, flush: FlushDiskType | None = None) -> StoreConfig:
    """The store's config; ``flush``: SYNC_FLUSH unless the CRASH_FLUSH variable names another."""
    flush = flush or FlushDiskType[os.environ.get("CRASH_FLUSH", "SYNC_FLUSH")]
    return StoreConfig(store_path_root_dir=root, flush_disk_type=flush,
                       mapped_file_size_commit_log=256 * 1024, mapped_file_size_consume_queue=100 * 20,
                       max_message_size=64 * 1024, flush_interval_consume_queue=50)


def message(index: int) -> Message:
    """Message ``index``: deterministic body of varying size, so the parent can check it."""
    body = (f"<{index}>".encode() * (index % 97 + 5))[: 30 + (index * 7919) % 3000]
    return Message(TOPIC, body, index % QUEUES, properties={"TAGS": f"t{index % 3}", "UNIQ_KEY": str(index)})


def replica(root: str, source: str) -> None:
    src = MessageStore(config(source))
    src.start()
    store = MessageStore(config(root))
    store.start()
    # Test seam: stop the reput thread so the dispatch stops where this process says.
    assert store._reput is not None
    store._reput.stop()
    store._log.reput_wakeup = None
    offset = src.min_offset
    while offset < src.max_offset:
        piece = src.get_data(offset, 32 * 1024)
        assert piece is not None
        with piece:
            offset = store.append_data(offset, piece.data)
    while store.dispatched_offset < store.max_offset // 2:
        store._log.reput(16)
    time.sleep(0.3)  # a checkpoint or two (flushIntervalConsumeQueue 50 ms) with the lagging dispatch
    print(f"READY {store.max_offset} {store.dispatched_offset}", flush=True)
    time.sleep(30)  # wait to be killed


def main() -> None:
    if sys.argv[1] == "--replica":
        replica(sys.argv[2], sys.argv[3])
        return
    root, seconds, first = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    store = MessageStore(config(root))
    store.start()
    out_lock = threading.Lock()
    counter = [first]
    deadline = time.monotonic() + seconds
    print("READY", flush=True)

    def writer() -> None:
        while time.monotonic() < deadline:
            with out_lock:
                index = counter[0]
                counter[0] += 3 if index % 10 == 0 else 1
            if index % 10 == 0:  # now and then a batch of three
                batch = [message(index), message(index + 1), message(index + 2)]
                result = store.put_messages(batch)
                indexes = [index, index + 1, index + 2]
            else:
                result = store.put_message(message(index))
                indexes = [index]
            if result.status is not PutMessageStatus.PUT_OK:
                continue
            acked = zip(indexes, result.queue_offsets, result.physical_offsets, strict=True)
            lines = "".join(f"{i} {i % QUEUES} {q} {p}\n" for i, q, p in acked)
            with out_lock:
                sys.stdout.write(lines)
                sys.stdout.flush()

    threads = [threading.Thread(target=writer, daemon=True) for _ in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 5)
    time.sleep(30)  # wait to be killed; never a clean shutdown


if __name__ == "__main__":
    main()
