"""``make run``: a local PocketMQ cluster in the foreground.

Starts one NameServer and one broker group (a master and a slave) as child processes on
loopback with data under ``./data`` (the HA port authenticated with a fresh random
``haAuthSecret`` each run, handed to the brokers in their environment; ``--ha-auth-secret ""``
turns it off; every gRPC and metrics port speaks TLS only, with a local CA made on the first
start under ``./data/tls`` and a server certificate it signs each start, ``--no-tls`` turns it
off), prints their addresses, metrics endpoints and how to connect, prefixes their log lines
with the process name, and stops everything gracefully on Ctrl-C / SIGTERM
(each child gets SIGTERM, flushes, unregisters and exits). If a child dies, the others are
stopped and the exit code is non-zero.

No child outlives it: a second Ctrl-C / SIGTERM, or an unexpected error, SIGKILLs every child
still running (and says so), and on Linux each child is started with ``PR_SET_PDEATHSIG`` so the
kernel kills it if this process dies (even of SIGKILL). Before starting anything it checks
that every port it will use is free, and if one is not, prints one line naming the port and the
process holding it, and exits with status 1.

With ``--failover`` (``make run RUN_ARGS=--failover``) the group runs under automatic failover
instead (docs/failover.md): Debian's ``etcd`` on ``--etcd-port`` (data under ``./data/etcd``)
and three members, brokerIds 1-3, SYNC_MASTER while leading, ``controllerMode=etcd``. Kill the
master (its pid is printed) and watch another take over within seconds.

    python -m services.local_cluster [--data-dir ./data] [--namesrv-port 9876] [--broker-port 10911]
                                     [--ha-auth-secret SECRET] [--no-tls] [--failover]
                                     [--etcd-port 2379]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import importlib.util
import os
import secrets
import shutil
import signal
import sys
import time
from pathlib import Path

from services.common.lifecycle import die_with_parent, run_service
from services.common.logs import setup_logging
from services.common.ports import bind_error, join_host_port, port_holder, reason_of
from services.common.tls import generate_ca, issue_certificate

STOP_TIMEOUT_S = 30.0
#: How long a SIGKILLed child may take to disappear before we stop waiting for it.
KILL_WAIT_S = 5.0


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    name: str
    module: str
    args: tuple[str, ...]
    endpoints: tuple[tuple[str, str], ...]
    #: Extra environment variables of the child (secrets: not on its command line).
    env: tuple[tuple[str, str], ...] = ()
    #: The ports it listens on, with what for (``gRPC``, ``HA``, ``metrics``).
    ports: tuple[tuple[str, int], ...] = ()
    #: A program to run instead of ``python -m module`` (etcd).
    command: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class LocalPki:
    """The local cluster's CA and the server certificate every child serves (and shows to the
    others as a client)."""

    ca: Path
    cert: Path
    key: Path

    def args(self) -> tuple[str, ...]:
        return ("--tls-enable", "true", "--tls-server-cert-path", str(self.cert),
                "--tls-server-key-path", str(self.key), "--tls-server-trust-cert-path", str(self.ca))


def ensure_pki(tls_dir: Path, hosts: tuple[str, ...]) -> LocalPki:
    """The CA under ``tls_dir`` (made once: clients keep trusting it across runs) and a fresh
    server certificate for ``hosts`` signed by it."""
    pki = LocalPki(tls_dir / "ca.crt", tls_dir / "server.crt", tls_dir / "server.key")
    ca_key = tls_dir / "ca.key"
    if not (pki.ca.exists() and ca_key.exists()):
        generate_ca(pki.ca, ca_key, "PocketMQ local cluster CA")
    issue_certificate(pki.ca, ca_key, pki.cert, pki.key, hosts, "pocketmq-local")
    return pki


def connect_notes(namesrv: str, pki: LocalPki | None, metrics: str) -> list[str]:
    """How to reach the cluster, printed under the banner."""
    if pki is None:
        return [f"connect: pocketmq --namesrv {namesrv} cluster list"]
    return [
        f"TLS on every port; trust the CA {pki.ca}:",
        f"  pocketmq cluster list --namesrv {namesrv} --ca-file {pki.ca}",
        f"  export POCKETMQ_NAMESRV={namesrv} POCKETMQ_TLS_CA_FILE={pki.ca}   "
        "(the CLI and the Python client read these)",
        f"  RocketMQ 5 SDKs: access point {namesrv} with TLS on (gRPC's C core SDKs: "
        f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={pki.ca})",
        f"  curl --cacert {pki.ca} {metrics}",
        "  (--no-tls runs everything in plaintext)",
    ]


def cluster_specs(data_dir: Path, host: str, namesrv_port: int, broker_port: int,
                  ha_auth_secret: str = "", tls: LocalPki | None = None,
                  failover_etcd_port: int = 0) -> list[ChildSpec]:
    """The processes of the local cluster, in start order. ``tls``: every gRPC and metrics port
    speaks TLS only with this certificate. ``failover_etcd_port``: run etcd there and the group
    as three members under controllerMode=etcd."""
    namesrv = f"{host}:{namesrv_port}"
    tls_args = tls.args() if tls else ()
    scheme = "https" if tls else "http"
    specs = [
        ChildSpec(
            "namesrv", "services.namesrv",
            ("--listen", namesrv, "--metrics-port", str(namesrv_port + 1),
             "--console-port", str(namesrv_port + 2), *tls_args),
            (("gRPC", namesrv), ("metrics", f"{scheme}://{host}:{namesrv_port + 1}/metrics"),
             ("console", f"http://{host}:{namesrv_port + 2}/"), ("tls", "on" if tls else "off")),
            ports=(("gRPC", namesrv_port), ("metrics", namesrv_port + 1), ("console", namesrv_port + 2)),
        )
    ]
    members: tuple[tuple[int, int], ...] = ((0, broker_port), (1, broker_port + 10))
    controller: tuple[str, ...] = ()
    if failover_etcd_port:
        etcd = f"http://{host}:{failover_etcd_port}"
        peer = f"http://{host}:{failover_etcd_port + 1}"
        specs.append(ChildSpec(
            "etcd", "etcd", (), (("client", etcd),), ports=(("client", failover_etcd_port),
                                                            ("peer", failover_etcd_port + 1)),
            command=("etcd", "--name", "local", "--data-dir", str(data_dir / "etcd"),
                     "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
                     "--listen-peer-urls", peer,
                     "--initial-advertise-peer-urls", peer, "--initial-cluster", f"local={peer}")))
        members = tuple((i, broker_port + 10 * (i - 1)) for i in (1, 2, 3))
        controller = ("--controller-mode", "etcd", "--controller-etcd-endpoints",
                      f"{host}:{failover_etcd_port}")
    for broker_id, port in members:
        role = "SYNC_MASTER" if controller else ("ASYNC_MASTER" if broker_id == 0 else "SLAVE")
        specs.append(ChildSpec(
            f"broker-a-{broker_id}", "services.broker",
            (*controller, "--broker-cluster-name", "DefaultCluster", "--broker-name", "broker-a",
             "--broker-id", str(broker_id), "--broker-role", role, "--namesrv-addr", namesrv,
             "--broker-ip1", host, "--listen-host", host, "--listen-port", str(port),
             "--store-path-root-dir", str(data_dir / f"broker-a-{broker_id}"), *tls_args),
            (("gRPC", f"{host}:{port}"), ("HA", f"{host}:{port + 1}"),
             ("metrics", f"{scheme}://{host}:{port + 2}/metrics"),
             ("role", "elected (etcd)" if controller else role),
             ("ha-auth", "on" if ha_auth_secret else "off"), ("tls", "on" if tls else "off")),
            (("POCKETMQ_HA_AUTH_SECRET", ha_auth_secret),),
            (("gRPC", port), ("HA", port + 1), ("metrics", port + 2)),
        ))
    return specs


def available(spec: ChildSpec) -> bool:
    if spec.command:
        return shutil.which(spec.command[0]) is not None
    return importlib.util.find_spec(f"{spec.module}.__main__") is not None


def busy_port(specs: list[ChildSpec], host: str) -> str | None:
    """One line naming the first port of ``specs`` that cannot be bound now (and who holds it,
    when that can be found), or ``None`` when every port is free."""
    for spec in specs:
        if not available(spec):
            continue
        for what, port in spec.ports:
            exc = bind_error(host, port)
            if exc is None:
                continue
            where = f"{join_host_port(host, port)} ({spec.name} {what})"
            if exc.errno != errno.EADDRINUSE:
                return f"cannot listen on {where}: {reason_of(exc)}"
            holder = port_holder(port)
            by = f"by {holder}" if holder else "by another process"
            return (f"port {port} is already in use {by}: needed for {where}; stop that process "
                    "or move the cluster with --namesrv-port / --broker-port")
    return None




def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie has: it holds no ports any more)."""
    if not os.path.isdir("/proc/self"):  # no /proc: a zombie still counts as running here
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


class Children:
    """The started children, so that every way out can kill the ones still running."""

    def __init__(self) -> None:
        self.procs: list[tuple[ChildSpec, asyncio.subprocess.Process]] = []

    def kill_all(self, why: str) -> None:
        """SIGKILL every child still running, say so, and wait (bounded) until they are gone."""
        left = [(spec, proc) for spec, proc in self.procs if proc.returncode is None and not gone(proc.pid)]
        if not left:
            return
        names = ", ".join(f"{spec.name} (pid {proc.pid})" for spec, proc in left)
        print(f"{why}: killing {names}", flush=True)
        for _, proc in left:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # each child leads its own session
        deadline = time.monotonic() + KILL_WAIT_S
        while not all(gone(proc.pid) for _, proc in left) and time.monotonic() < deadline:
            time.sleep(0.01)


async def pump(name: str, stream: asyncio.StreamReader) -> None:
    width = 11
    while line := await stream.readline():
        sys.stdout.write(f"{name:<{width}}| {line.decode(errors='replace')}")
        sys.stdout.flush()


async def run_cluster(specs: list[ChildSpec], stop: asyncio.Event, children: Children | None = None,
                      notes: list[str] | None = None) -> int:
    """Run the children until ``stop``; ``notes``: lines printed under the banner."""
    children = Children() if children is None else children
    try:
        return await _run_cluster(specs, stop, children, notes or [])
    finally:
        children.kill_all("the local cluster is exiting on an error")


async def _run_cluster(specs: list[ChildSpec], stop: asyncio.Event, children: Children,
                       notes: list[str]) -> int:
    procs = children.procs
    pumps = []
    preexec = die_with_parent()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for spec in specs:
        if not available(spec):
            print(f"{spec.name}: {spec.module} is not built yet, skipped", flush=True)
            continue
        argv = spec.command or (sys.executable, "-m", spec.module, *spec.args)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**env, **dict(spec.env)},
            start_new_session=True,  # Ctrl-C reaches only us; we stop children in order
            preexec_fn=preexec,  # and they die with us
        )
        assert proc.stdout is not None
        pumps.append(asyncio.create_task(pump(spec.name, proc.stdout)))
        procs.append((spec, proc))
        await asyncio.sleep(0.5)  # the NameServer first, so brokers register at once
    if not procs:
        print("nothing to run", flush=True)
        return 1
    print("\nPocketMQ local cluster (Ctrl-C stops it):", flush=True)
    for spec, proc in procs:
        ends = "  ".join(f"{k}={v}" for k, v in spec.endpoints)
        print(f"  {spec.name:<11} pid={proc.pid}  {ends}", flush=True)
    for note in notes:
        print(note, flush=True)
    print(flush=True)

    waiters = {asyncio.create_task(proc.wait()): spec for spec, proc in procs}
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopper, *waiters], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    for task in done:
        if task in waiters:
            print(f"{waiters[task].name} exited with {task.result()}; stopping the cluster", flush=True)
            code = 1
    # Stop brokers before the NameServer so they can unregister.
    for spec, proc in reversed(procs):
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                print(f"{spec.name} did not stop within {STOP_TIMEOUT_S:.0f}s; killing it", flush=True)
                proc.kill()
                await proc.wait()
            code = code or (1 if proc.returncode not in (0, -signal.SIGTERM) else 0)
    await asyncio.gather(*pumps, return_exceptions=True)
    stopper.cancel()
    print("local cluster stopped", flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--namesrv-port", type=int, default=9876)
    parser.add_argument("--broker-port", type=int, default=10911)
    parser.add_argument("--ha-auth-secret", default=None,
                        help="haAuthSecret of the broker group (default: a random one each run; "
                             "\"\" = no HA authentication)")
    parser.add_argument("--no-tls", action="store_true",
                        help="plaintext on every port (default: TLS only, with a local CA under "
                             "<data-dir>/tls)")
    parser.add_argument("--failover", action="store_true",
                        help="etcd and three members under controllerMode=etcd (automatic failover)")
    parser.add_argument("--etcd-port", type=int, default=2379, help="etcd's client port with --failover")
    args = parser.parse_args(argv)
    secret = secrets.token_hex(16) if args.ha_auth_secret is None else args.ha_auth_secret
    tls_dir = args.data_dir.resolve() / "tls"
    planned = None if args.no_tls else LocalPki(tls_dir / "ca.crt", tls_dir / "server.crt",
                                                tls_dir / "server.key")
    specs = cluster_specs(args.data_dir.resolve(), args.host, args.namesrv_port, args.broker_port, secret,
                          planned, args.etcd_port if args.failover else 0)
    busy = busy_port(specs, args.host)
    if busy is not None:
        print(busy, file=sys.stderr, flush=True)
        return 1
    setup_logging("local-cluster")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    hosts = tuple(dict.fromkeys(("localhost", "127.0.0.1", args.host)))
    pki = None if args.no_tls else ensure_pki(tls_dir, hosts)
    notes = connect_notes(f"{args.host}:{args.namesrv_port}", pki,
                          f"{'https' if pki else 'http'}://{args.host}:{args.namesrv_port + 1}/metrics")
    children = Children()
    result = 0

    async def service(stop: asyncio.Event) -> None:
        nonlocal result
        result = await run_cluster(specs, stop, children, notes)

    return run_service(service, lambda: children.kill_all("second signal")) or result


if __name__ == "__main__":
    sys.exit(main())
