"""Example streaming pipeline: events topic -> windowed aggregates -> Parquet + a results topic.

Events are JSON message bodies such as ``{"user": "u17", "type": "click", "amount": 2.5,
"ts": 1767225600000}`` (``ts`` in epoch milliseconds; messages without it use the time the
producer sent them). Per event-time window (``--window``, default 10 seconds) and event type the
job computes the number of events, the amount summed and the approximate number of distinct
users. A window is final once the watermark (``--watermark`` behind the latest event time)
passes its end; then it is

* appended to Parquet files under ``--output`` (Spark's file sink: exactly once), and
* published to ``--results-topic`` as one JSON message per (window, type), tag = the event type,
  key = the window start (the pocketmq sink: at least once - a re-run micro-batch is sent again).

Both sinks are separate streaming queries over the same events, each with its own checkpoint
under ``--checkpoint``; restarted with the same checkpoint they continue where they stopped.

Locally, against the cluster ``make run`` starts (``make pipeline``)::

    python -m pocketmq.spark.examples.events_pipeline --namesrv 127.0.0.1:9876 --generate-rate 200

On a Spark cluster (pocketmq[spark] installed in the Python environment of every node)::

    spark-submit --master spark://spark-master:7077 \\
        --conf spark.pyspark.python=/opt/pocketmq/bin/python \\
        pocketmq/spark/examples/events_pipeline.py --namesrv ns-0.pocketmq:9876 \\
        --output s3a://analytics/event-stats --checkpoint s3a://analytics/checkpoints/event-stats
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from pocketmq.wire.address import DEFAULT_NAMESRV

log = logging.getLogger("pocketmq.spark.examples")

EVENT_SCHEMA = "user STRING, type STRING, amount DOUBLE, ts LONG"
EVENT_TYPES = ("view", "click", "cart", "purchase")


def window_stats(events: Any, window: str, watermark: str) -> Any:
    """Messages of the pocketmq source -> one row per (event-time window, event type):
    window_start, window_end, type, events, amount, users."""
    from pyspark.sql import functions as sf

    parsed = events.select(sf.from_json(sf.col("body").cast("string"), EVENT_SCHEMA).alias("e"),
                           "born_timestamp")
    rows = parsed.select(
        sf.coalesce(sf.timestamp_millis(sf.col("e.ts")), sf.col("born_timestamp")).alias("event_time"),
        sf.coalesce(sf.col("e.type"), sf.lit("unknown")).alias("type"),
        sf.col("e.user").alias("user"),
        sf.coalesce(sf.col("e.amount"), sf.lit(0.0)).alias("amount"),
    )
    return (rows.withWatermark("event_time", watermark)
            .groupBy(sf.window("event_time", window).alias("w"), "type")
            .agg(sf.count(sf.lit(1)).alias("events"), sf.sum("amount").alias("amount"),
                 sf.approx_count_distinct("user").alias("users"))
            .select(sf.col("w.start").alias("window_start"), sf.col("w.end").alias("window_end"),
                    "type", "events", "amount", "users"))


def as_messages(stats: Any) -> Any:
    """Aggregates -> the columns the pocketmq writer takes (body, tags, keys)."""
    from pyspark.sql import functions as sf

    return stats.select(
        sf.to_json(sf.struct(
            sf.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
            sf.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
            "type", "events", sf.round("amount", 2).alias("amount"), "users")).alias("body"),
        sf.col("type").alias("tags"),
        sf.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("keys"),
    )


def start_queries(spark: Any, args: argparse.Namespace) -> list[Any]:
    """Start the Parquet query and the results-topic query; returns them."""
    tls = {"tlsCaFile": args.ca_file} if args.ca_file else {}
    events = (spark.readStream.format("pocketmq").options(**tls)
              .option("namesrv", args.namesrv).option("topic", args.events_topic)
              .option("startingOffsets", args.starting_offsets)
              .option("maxMessagesPerTrigger", args.max_per_trigger)
              .load())
    stats = window_stats(events, args.window, args.watermark)

    def trigger(writer: Any) -> Any:
        return writer.trigger(availableNow=True) if args.available_now else \
            writer.trigger(processingTime=args.trigger)

    checkpoint = args.checkpoint.rstrip("/")
    parquet = trigger(stats.writeStream.format("parquet").outputMode("append")
                      .option("checkpointLocation", f"{checkpoint}/parquet")
                      .queryName("event_stats_parquet")).start(args.output)
    topic = trigger(as_messages(stats).writeStream.format("pocketmq").outputMode("append")
                    .options(**tls).option("namesrv", args.namesrv).option("topic", args.results_topic)
                    .option("checkpointLocation", f"{checkpoint}/topic")
                    .queryName("event_stats_topic")).start()
    return [parquet, topic]


def client_tls(ca_file: str) -> Any:
    from pocketmq.wire.tls import ClientTls

    return ClientTls(ca_file=ca_file) if ca_file else False


def create_topics(namesrv: str, topics: Sequence[str], queues: int, ca_file: str = "") -> None:
    """Create the topics that no NameServer knows yet (on every master)."""
    from pocketmq.client.admin import Admin
    from pocketmq.errors import NoRouteError

    with Admin(namesrv, tls=client_tls(ca_file)) as admin:
        for topic in topics:
            try:
                admin.route(topic)
                continue
            except NoRouteError:
                pass
            for result in admin.create_topic(topic, read_queues=queues, write_queues=queues):
                if not result.ok:
                    raise RuntimeError(f"cannot create topic {topic!r}: {result.error}")
            log.info("created topic %s (%d queues per master)", topic, queues)
        deadline = time.monotonic() + 30
        for topic in topics:
            while True:
                try:
                    admin.route(topic)
                    break
                except NoRouteError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)


def generate(namesrv: str, topic: str, rate: float, stop: threading.Event, ca_file: str = "") -> None:
    """Send about ``rate`` random events per second until ``stop`` is set (demo data)."""
    from pocketmq.client.message import Message
    from pocketmq.client.producer import Producer

    rng = random.Random()
    interval = 0.2
    with Producer(namesrv, tls=client_tls(ca_file)) as producer:
        while not stop.is_set():
            started = time.monotonic()
            now = int(time.time() * 1000)
            batch = [Message(topic, json.dumps({
                "user": f"u{rng.randrange(1000)}", "type": rng.choice(EVENT_TYPES),
                "amount": round(rng.expovariate(0.1), 2), "ts": now - rng.randrange(2000)}).encode(),
                tags="event") for _ in range(max(1, int(rate * interval)))]
            try:
                producer.send_batch(batch)
            except Exception as exc:  # a demo generator keeps going
                log.warning("event generator: send failed: %s", exc)
            stop.wait(max(0.0, interval - (time.monotonic() - started)))


def session(args: argparse.Namespace) -> Any:
    """The SparkSession: the one spark-submit prepared, else a local one (``--master``)."""
    import pocketmq.spark

    if "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit / pyspark
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("pocketmq-events-pipeline").getOrCreate()
        if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
            spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        pocketmq.spark.register(spark)
        if not str(spark.conf.get("spark.master", "")).startswith("local"):
            pocketmq.spark.check_workers(spark)
        return spark
    return pocketmq.spark.local_session("pocketmq-events-pipeline", args.master, {
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.ui.showConsoleProgress": "false"})


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default=os.environ.get("POCKETMQ_NAMESRV", DEFAULT_NAMESRV))
    parser.add_argument("--ca-file", default=os.environ.get("POCKETMQ_TLS_CA_FILE", ""),
                        help="CA of a TLS cluster (make run's: data/tls/ca.crt); empty = plaintext")
    parser.add_argument("--events-topic", default="events")
    parser.add_argument("--results-topic", default="event-stats")
    parser.add_argument("--output", default="data/pipeline/event-stats",
                        help="Parquet directory (any Hadoop URI)")
    parser.add_argument("--checkpoint", default="data/pipeline/checkpoints", help="checkpoint root directory")
    parser.add_argument("--window", default="10 seconds")
    parser.add_argument("--watermark", default="5 seconds")
    parser.add_argument("--trigger", default="5 seconds", help="micro-batch interval")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--available-now", action="store_true",
                        help="process what the topic holds now, then stop")
    parser.add_argument("--duration", type=float, default=0,
                        help="stop after this many seconds (0 = until interrupted)")
    parser.add_argument("--generate-rate", type=float, default=0,
                        help="also produce this many random events per second (demo data)")
    parser.add_argument("--no-create-topics", dest="create_topics", action="store_false")
    parser.add_argument("--queues", type=int, default=4, help="queues per master of created topics")
    parser.add_argument("--master", default="local[*]", help="Spark master when not run by spark-submit")
    parser.add_argument("--shuffle-partitions", type=int, default=4,
                        help="state partitions of the aggregation (unless spark.sql.shuffle.partitions"
                        " is set)")
    return parser.parse_args(argv)


def run(spark: Any, args: argparse.Namespace) -> None:
    """Run the pipeline on ``spark`` until it finishes (``--available-now``), ``--duration``
    passes, or it is interrupted."""
    if args.create_topics:
        create_topics(args.namesrv, [args.events_topic, args.results_topic], args.queues, args.ca_file)
    stop = threading.Event()
    generator = None
    if args.generate_rate > 0:
        generator = threading.Thread(target=generate, name="event-generator", daemon=True,
                                     args=(args.namesrv, args.events_topic, args.generate_rate, stop,
                                           args.ca_file))
        generator.start()
    queries = start_queries(spark, args)
    deadline = time.monotonic() + args.duration if args.duration > 0 else None
    reported: dict[str, int] = {}
    try:
        while any(q.isActive for q in queries):
            if deadline is not None and time.monotonic() >= deadline:
                break
            _raise_failure(queries)
            for q in queries:
                progress = q.lastProgress
                if progress and progress["batchId"] != reported.get(q.name) and progress["numInputRows"]:
                    reported[q.name] = progress["batchId"]
                    log.info("%s: batch %s read %s messages", q.name, progress["batchId"],
                             progress["numInputRows"])
            time.sleep(1)
        _raise_failure(queries)
    finally:
        stop.set()
        for q in queries:
            q.stop()
        if generator is not None:
            generator.join(5)


def _raise_failure(queries: Sequence[Any]) -> None:
    for q in queries:
        error = q.exception()
        if error is not None:
            raise error


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    spark = session(args)
    spark.sparkContext.setLogLevel("WARN")
    try:
        run(spark, args)
    except KeyboardInterrupt:
        log.info("interrupted; the checkpoints let the next run continue")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
