"""``python -m pocketmq.console --namesrv HOST:PORT --listen HOST:PORT``: run the web console
until SIGTERM / SIGINT (what a NameServer with ``consolePort`` starts next to itself)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from pocketmq.console.server import ConsoleServer
from pocketmq.errors import PocketMQError
from pocketmq.wire.address import AddressError, parse_host_port

log = logging.getLogger("pocketmq.console")


async def serve(namesrv: str, host: str, port: int) -> None:
    server = ConsoleServer(host, port, namesrv)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("console stopping")
    await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pocketmq.console", description=__doc__)
    parser.add_argument("--namesrv", required=True, help="NameServer address(es), host:port[;host:port]")
    parser.add_argument("--listen", default="127.0.0.1:9878", help="host:port to serve on (port 0 = any)")
    parser.add_argument("--log-format", default="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        help="logging format of the lines written to stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=args.log_format)
    try:
        host, port = parse_host_port(args.listen, default_host="127.0.0.1", allow_port_zero=True)
    except AddressError as exc:
        parser.error(f"--listen: {exc}")
    try:
        asyncio.run(serve(args.namesrv, host, port))
    except OSError as exc:
        log.error("cannot serve the console on %s: %s", args.listen, exc.strerror or exc)
        return 1
    except PocketMQError as exc:
        log.error("console failed: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
