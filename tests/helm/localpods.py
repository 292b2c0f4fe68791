"""Run a rendered chart's pods as local processes on loopback: a stand-in for a cluster.

Each pod the workloads would create (see :meth:`Manifests.pods`) becomes one process started
from the pod's own container spec: ``command`` + ``args`` and ``env`` exactly as rendered, with
the kubelet's semantics (downward API, ``$(VAR)`` expansion, the image's ``ENV`` from the
Dockerfile), readiness judged by the rendered gRPC readiness probe, and termination by SIGTERM
with the pod's ``terminationGracePeriodSeconds``. What a cluster provides and a laptop does not is
emulated by five rewrites, applied to argv, env values and mounted files alike, and recorded per
pod (:attr:`LocalPod.rewrites`), and optionally a sixth piece (6):

1. **Pod network.** Every pod gets its own loopback address (127.x.y.n) as its pod IP, and a bind
   to ``0.0.0.0`` (all of the pod's interfaces) becomes a bind to that address, so all pods use
   their real container ports side by side.
2. **Cluster DNS.** Names are resolved from the rendered objects as CoreDNS would: a Service
   name (``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.<domain>``) through its selector to
   the selected pod and its ``targetPort``, and ``<pod>.<governing headless service>...`` of a
   StatefulSet pod to that pod. A name that does not resolve (a typo in the chart) or a headless
   name with several pods used as one address is an error (except as in 5).
3. **Volumes.** ConfigMap and Secret volumes become directories holding their files; emptyDir and
   PersistentVolumeClaim volumes become empty directories; a mountPath in argv/env/files becomes
   that directory.
4. **Image.** ``python`` is the test environment's interpreter (the project installed in the
   virtualenv, as the image installs it in /opt/pocketmq).
5. **Multi-address names in namesrvAddr.** In a cluster a headless Service name resolves to one
   A record per ready pod, and the broker's registrar resolves each ``namesrvAddr`` entry every
   round and registers with every address. A local process cannot be handed a custom resolver
   (no /etc/hosts edits), so where PocketMQ reads a RocketMQ-style NameServer list -- the
   ``namesrvAddr`` key of a mounted file, ``POCKETMQ_NAMESRV_ADDR``, the ``--namesrv-addr``
   flag -- an entry ``<headless service>:port`` becomes ``podA-ip:port;podB-ip:port;...``: the
   list the registrar would get from DNS with every selected pod ready. This tests that the
   chart's brokers name every NameServer; the registrar's own resolution (and its following of
   pods that come and go) is tested in tests/integration/namesrv/test_resolution.py.
6. **Kubernetes API** (only with ``api_server``, a :class:`tests.fake_apiserver.FakeApiServer`).
   In a pod the API server is reached in-cluster with the ServiceAccount's token; here every pod
   gets ``POCKETMQ_CONTROLLER_K8S_API_SERVER`` naming the fake instead (recorded as a rewrite),
   the fake holds every workload pod with its template's labels, and Service selection (DNS,
   scrape targets) uses the labels the pods have there now, so a Service selecting
   ``pocketmq.io/role: master`` follows the broker that labelled itself master.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fake_apiserver import FakeApiServer
from tests.helm.chart import ROLE_LABEL, ROOT, Manifests, PodTemplate, selector_matches
from tests.helm.podenv import container_argv, container_env

DOCKERFILE = ROOT / "Dockerfile"
#: Where PocketMQ reads a RocketMQ-style NameServer list ("a:9876;b:9876"): config key, env, flag.
NAMESRV_LIST_KEY = "namesrvAddr"
NAMESRV_LIST_ENV = "POCKETMQ_NAMESRV_ADDR"
NAMESRV_LIST_FLAG = "--namesrv-addr"
IMAGE_PREFIX = "/opt/pocketmq"
_BOUNDARY_BEFORE = r"(?<![A-Za-z0-9.\-])"
_BOUNDARY_AFTER = r"(?![A-Za-z0-9\-]|\.[A-Za-z0-9])"


class ClusterError(AssertionError):
    """The rendered chart cannot run as written (unresolvable name, missing volume, ...)."""


def image_env() -> dict[str, str]:
    """``ENV`` of the Dockerfile's final stage, with the image's virtualenv mapped to ours."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    final = text.split("\nFROM ")[-1]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.strip().startswith("ENV "):
            for key, value in re.findall(r"(\w+)=(\S+)", line):
                env[key] = value
    venv = str(Path(sys.executable).parent.parent)
    for key, value in env.items():
        env[key] = value.replace(IMAGE_PREFIX, venv).replace("$PATH", os.environ.get("PATH", "/usr/bin:/bin"))
    return env


def _sub_word(pattern: str, repl: Any, text: str) -> str:
    return re.sub(_BOUNDARY_BEFORE + pattern + _BOUNDARY_AFTER, repl, text)


@dataclasses.dataclass
class LocalPod:
    template: PodTemplate
    ip: str
    dir: Path
    argv: list[str] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    rewrites: list[str] = dataclasses.field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    #: The container's own environment (its spec's ``env`` after the rewrites; no image ENV).
    spec_env: dict[str, str] = dataclasses.field(default_factory=dict)
    #: mountPath -> the local directory standing for that volume.
    mounts: dict[str, Path] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.template.name

    @property
    def component(self) -> str:
        return self.template.labels.get("app.kubernetes.io/component", "")

    def addr(self, port_name: str) -> str:
        return f"{self.ip}:{self.template.port(port_name)}"

    def log_text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def describe(self, lines: int = 60) -> str:
        state = "not started"
        if self.process is not None:
            code = self.process.poll()
            state = "running" if code is None else f"exited with {code}"
        tail = "\n".join(self.log_text().splitlines()[-lines:])
        rewrites = "\n  ".join(self.rewrites) or "(none)"
        return (f"pod {self.name} ip={self.ip} ({state})\n$ {' '.join(self.argv)}\n"
                f"rewrites:\n  {rewrites}\nlog tail:\n{tail}")

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP the pod's processes for the duration (a frozen pod: sockets stay open)."""
        self.signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.signal(signal.SIGCONT)


class LocalCluster:
    """The pods of ``manifests`` (all but ``helm test`` hooks) as processes under ``workdir``."""

    def __init__(self, manifests: Manifests, workdir: Path, namespace: str,
                 cluster_domain: str = "cluster.local", subnet: str | None = None,
                 keep_mount_paths: bool = False, api_server: FakeApiServer | None = None) -> None:
        self.manifests = manifests
        #: Emulation 6 (the Kubernetes API), or None.
        self.api_server = api_server
        #: Leave mountPaths as written (no rewrite 3): for pods run as containers that mount
        #: each :attr:`LocalPod.mounts` directory at its mountPath.
        self.keep_mount_paths = keep_mount_paths
        self.workdir = workdir
        self.namespace = namespace
        self.cluster_domain = cluster_domain
        if subnet is None:  # a random 127.a.b.0/24 per cluster: no clash with other tests' 127.0.0.1
            subnet = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}"
        self.subnet = subnet
        self.image_env = image_env()
        self.pods: list[LocalPod] = []
        templates = manifests.pods()
        for n, template in enumerate(templates, start=10):
            self.pods.append(LocalPod(template, f"{subnet}.{n}", workdir / template.name))
        if api_server is not None:
            for pod in self.workload_pods():  # as created: without the labels brokers set at run time
                labels = {k: v for k, v in pod.template.labels.items() if k != ROLE_LABEL}
                api_server.add_pod(namespace, pod.name, labels)
        self.dns = self._dns_table()

    # -- lookup -------------------------------------------------------------------------------

    def pod(self, name: str) -> LocalPod:
        return next(p for p in self.pods if p.name == name)

    def by_component(self, component: str) -> list[LocalPod]:
        return [p for p in self.pods if p.component == component]

    def workload_pods(self) -> list[LocalPod]:
        return [p for p in self.pods if p.template.owner_kind != "Pod"]

    def labels(self, pod: LocalPod) -> Mapping[str, str]:
        """The pod's labels now: the fake API server's (emulation 6), else its template's."""
        if self.api_server is not None and (self.namespace, pod.name) in self.api_server.pods:
            return self.api_server.pod_labels(self.namespace, pod.name)
        return pod.template.labels

    def _selected(self, selector: Mapping[str, str]) -> list[LocalPod]:
        return [p for p in self.pods if p.template.owner_kind != "Pod"
                and selector_matches({"matchLabels": dict(selector)}, self.labels(p))]

    # -- DNS ----------------------------------------------------------------------------------

    def _names(self, *labels: str) -> list[str]:
        base = ".".join(labels)
        ns, domain = self.namespace, self.cluster_domain
        return [base + s for s in ("", f".{ns}", f".{ns}.svc", f".{ns}.svc.{domain}")]

    def _dns_table(self) -> dict[str, tuple[str, list[LocalPod]]]:
        """name -> (service name or "", pods it resolves to)."""
        table: dict[str, tuple[str, list[LocalPod]]] = {}
        for svc in self.manifests.of_kind("Service"):
            name = svc["metadata"]["name"]
            pods = self._selected(svc["spec"].get("selector") or {})
            for dns_name in self._names(name):
                table[dns_name] = (name, pods)
        for sts in self.manifests.of_kind("StatefulSet"):
            governing = sts["spec"]["serviceName"]
            svc = next((s for s in self.manifests.of_kind("Service")
                        if s["metadata"]["name"] == governing), None)
            if svc is None or svc["spec"].get("clusterIP") != "None":
                raise ClusterError(f"StatefulSet {sts['metadata']['name']}: governing Service {governing} "
                                   "is missing or not headless, so its pods get no DNS names")
            for pod in self.pods:
                if pod.template.owner_name == sts["metadata"]["name"]:
                    if not selector_matches({"matchLabels": svc["spec"]["selector"]}, pod.template.labels):
                        raise ClusterError(f"{governing} does not select {pod.name}: no DNS record for it")
                    for dns_name in self._names(pod.name, governing):
                        table[dns_name] = ("", [pod])
        return table

    def _is_headless(self, service: str) -> bool:
        return bool(service) and self.manifests.get("Service", service)["spec"].get("clusterIP") == "None"

    def _address(self, service: str, target: LocalPod, port: int | None) -> str:
        """``ip[:target port]`` of ``target`` reached through ``service`` ("" = a pod name)."""
        if port is None:
            return target.ip
        if service:
            svc_port = next((p for p in self.manifests.get("Service", service)["spec"]["ports"]
                             if p["port"] == port), None)
            if svc_port is None:
                raise ClusterError(f"Service {service} has no port {port}")
            tp = svc_port.get("targetPort", port)
            port = target.template.port(tp) if isinstance(tp, str) else int(tp)
        return f"{target.ip}:{port}"

    def resolve(self, name: str, port: int | None = None) -> str:
        """``name[:port]`` -> ``ip[:target port]`` as a client in the namespace would reach it."""
        if self.api_server is not None:  # labels change at run time
            self.dns = self._dns_table()
        if name not in self.dns:
            raise ClusterError(f"{name!r} does not resolve")
        service, pods = self.dns[name]
        if not pods:
            raise ClusterError(f"{name!r} selects no pod")
        if len(pods) > 1 and self._is_headless(service):
            raise ClusterError(f"{name!r} is a headless Service with {len(pods)} pods used as one address")
        # a ClusterIP Service: kube-proxy picks a pod; we pick the first
        return self._address(service, pods[0], port)

    def resolve_all(self, name: str, port: int | None = None) -> list[str]:
        """Every address ``name[:port]`` resolves to: one per selected pod for a headless Service
        (its A records, all pods taken as ready), else the one :meth:`resolve` gives."""
        if self.api_server is not None:
            self.dns = self._dns_table()
        if name not in self.dns:
            raise ClusterError(f"{name!r} does not resolve")
        service, pods = self.dns[name]
        if not pods:
            raise ClusterError(f"{name!r} selects no pod")
        if not self._is_headless(service):
            return [self.resolve(name, port)]
        return [self._address(service, pod, port) for pod in pods]

    def _expand_namesrv_list(self, pod: LocalPod, value: str, where: str) -> str:
        """Rewrite 5: each ``<headless name>:port`` entry of a NameServer list -> the addresses of
        all its pods. Other entries are left to the ordinary DNS rewrite."""
        entries: list[str] = []
        for entry in value.split(";"):
            host, sep, port = entry.strip().rpartition(":")
            if sep and port.isdigit() and host in self.dns and self._is_headless(self.dns[host][0]):
                addrs = self.resolve_all(host, int(port))
                pod.rewrites.append(f"{where}: {NAMESRV_LIST_KEY} entry {entry.strip()!r} -> "
                                    f"{';'.join(addrs)!r} (headless Service: every pod's address, as "
                                    "the broker's registrar resolves it each round)")
                entries += addrs
            else:
                entries.append(entry)
        return ";".join(entries)

    # -- rewriting ----------------------------------------------------------------------------

    def _rewrite(self, pod: LocalPod, text: str, mounts: Mapping[str, Path], where: str,
                 namesrv_list: bool = False) -> str:
        """Rewrites 1-3 and 5 of ``text`` (an argv item, env value or file); ``namesrv_list``:
        the whole text is a NameServer list (files: their ``namesrvAddr`` lines are)."""
        original = text
        if namesrv_list:
            text = self._expand_namesrv_list(pod, text, where)
        elif where.startswith("file "):
            text = re.sub(r"^([ \t]*" + NAMESRV_LIST_KEY + r"[ \t]*[=:][ \t]*)(\S+)[ \t]*$",
                          lambda m: m.group(1) + self._expand_namesrv_list(pod, m.group(2), where),
                          text, flags=re.M)
        for name in sorted(self.dns, key=len, reverse=True):
            def repl(m: re.Match[str], name: str = name) -> str:
                return self.resolve(name, int(m.group(1)) if m.group(1) else None)
            text = _sub_word(re.escape(name) + r"(?::(\d+))?", repl, text)
        leftover = re.search(r"[a-z0-9.-]+\.svc\." + re.escape(self.cluster_domain), text)
        if leftover:
            raise ClusterError(f"{pod.name}: {where} names {leftover.group(0)!r}, which does not resolve")
        text = _sub_word(re.escape("0.0.0.0"), pod.ip, text)
        if mounts:  # one pass, longest mountPath first, so a rewritten path is never rewritten again
            alternatives = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
            text = re.sub(r"(?<![\w/.-])(" + alternatives + r")(?=/|$|[\s;:,=\"'])",
                          lambda m: str(mounts[m.group(1)]), text, flags=re.M)
        if text != original:
            pod.rewrites.append(f"{where}: {original!r} -> {text!r}" if "\n" not in original
                                else f"{where}: rewritten")
        return text

    def _prepare(self, pod: LocalPod) -> None:
        t = pod.template
        (container,) = t.spec["containers"]
        if pod.dir.exists():
            shutil.rmtree(pod.dir)
        pod.dir.mkdir(parents=True)
        pod_obj = {"metadata": {**t.metadata, "name": pod.name, "namespace": self.namespace,
                                "uid": f"uid-{pod.name}"},
                   "spec": t.spec, "status": {"podIP": pod.ip, "hostIP": "127.0.0.1"}}
        volumes = {v["name"]: v for v in t.spec.get("volumes", [])}
        claims: set[str] = set()
        if t.owner_kind == "StatefulSet":
            owner_spec = self.manifests.get(t.owner_kind, t.owner_name)["spec"]
            templates = owner_spec.get("volumeClaimTemplates") or []
            claims = {c["metadata"]["name"] for c in templates}
        mounts: dict[str, Path] = {}
        config_files: list[tuple[Path, str]] = []
        for mount in container.get("volumeMounts", []):
            local = pod.dir / "mnt" / mount["mountPath"].strip("/")
            local.mkdir(parents=True, exist_ok=True)
            volume = volumes.get(mount["name"])
            if volume is None and mount["name"] not in claims:
                raise ClusterError(f"{pod.name}: volumeMount {mount['name']} has no volume or claim")
            if volume is not None and "configMap" in volume:
                data = self.manifests.get("ConfigMap", volume["configMap"]["name"])["data"]
                config_files += [(local / key, text) for key, text in data.items()]
            if volume is not None and "secret" in volume:
                data = self.manifests.secrets()[volume["secret"]["secretName"]]
                config_files += [(local / key, text) for key, text in data.items()]
            mounts[mount["mountPath"]] = local
        pod.mounts = dict(mounts)
        if self.keep_mount_paths:
            mounts = {}
        spec_env = container_env(container, pod_obj, secrets=self.manifests.secrets())
        argv = container_argv(container, {**self.image_env, **spec_env})
        pod.spec_env = {k: self._rewrite(pod, v, mounts, f"env {k}", namesrv_list=k == NAMESRV_LIST_ENV)
                        for k, v in spec_env.items()}
        pod.env = {**self.image_env, "HOSTNAME": pod.name, "HOME": str(pod.dir), **pod.spec_env}
        if self.api_server is not None:
            pod.env["POCKETMQ_CONTROLLER_K8S_API_SERVER"] = self.api_server.url
            pod.rewrites.append(f"Kubernetes API: POCKETMQ_CONTROLLER_K8S_API_SERVER={self.api_server.url} "
                                "(in a pod: in-cluster)")
        pod.argv = []
        for i, arg in enumerate(argv):
            flag, eq, value = arg.partition("=")
            if flag == NAMESRV_LIST_FLAG and eq:
                arg = flag + "=" + self._rewrite(pod, value, mounts, "argv", namesrv_list=True)
            else:
                arg = self._rewrite(pod, arg, mounts, "argv",
                                    namesrv_list=i > 0 and argv[i - 1] == NAMESRV_LIST_FLAG)
            pod.argv.append(arg)
        for path, text in config_files:
            path.write_text(self._rewrite(pod, text, mounts, f"file {path.relative_to(pod.dir / 'mnt')}"))

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, pods: Iterable[LocalPod] | None = None, ready_timeout: float = 60.0) -> None:
        """Start pods as their controllers would: a StatefulSet with ``podManagementPolicy:
        OrderedReady`` (the Kubernetes default) one ordinal at a time, each once the one before
        it is ready; everything else at once."""
        for pod in list(pods) if pods is not None else self.workload_pods():
            if pod.template.owner_kind == "StatefulSet" and pod.template.ordinal > 0:
                owner = self.manifests.get("StatefulSet", pod.template.owner_name)
                if owner["spec"].get("podManagementPolicy", "OrderedReady") == "OrderedReady":
                    previous = self.pod(f"{pod.template.owner_name}-{pod.template.ordinal - 1}")
                    if previous.process is not None:
                        self.wait_ready(ready_timeout, [previous])
            self._launch(pod)

    def _launch(self, pod: LocalPod) -> None:
        self._prepare(pod)
        pod.log_path = pod.dir / "log.txt"
        with open(pod.log_path, "ab") as log:
            pod.process = subprocess.Popen(pod.argv, env=pod.env, cwd=pod.dir, stdin=subprocess.DEVNULL,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 60.0, pods: Iterable[LocalPod] | None = None) -> None:
        """Run each pod's rendered readiness probe (gRPC health on the pod IP) until it passes."""
        deadline = time.monotonic() + timeout
        for pod in list(pods) if pods is not None else self.workload_pods():
            (container,) = pod.template.spec["containers"]
            probe = container["readinessProbe"]["grpc"]
            address, service = f"{pod.ip}:{probe['port']}", probe.get("service", "")
            with grpc.insecure_channel(address) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                while True:
                    if pod.process is None or pod.process.poll() is not None:
                        raise ClusterError(f"pod exited before it was ready\n{pod.describe()}")
                    with contextlib.suppress(grpc.RpcError):
                        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1.0)
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            break
                    if time.monotonic() > deadline:
                        raise ClusterError(f"readiness probe of {pod.name} not passing\n{pod.describe()}")
                    time.sleep(0.1)

    def run_to_completion(self, pod: LocalPod, timeout: float) -> int:
        """Run a restartPolicy: Never pod (the helm test hook) and return its exit code."""
        self._launch(pod)
        assert pod.process is not None
        try:
            return pod.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pod.signal(signal.SIGKILL)
            raise ClusterError(f"{pod.name} did not finish within {timeout:g}s\n{pod.describe()}") from None

    def stop(self, pods: Iterable[LocalPod] | None = None, max_grace: float = 30.0) -> dict[str, int | None]:
        """SIGTERM (as the kubelet does after preStop), SIGKILL after terminationGracePeriodSeconds
        (capped at ``max_grace``). Returns pod -> exit code (negative = killed by that signal)."""
        chosen = [p for p in (list(pods) if pods is not None else self.pods) if p.process is not None]
        for pod in chosen:
            pod.signal(signal.SIGCONT)
            pod.signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for pod in chosen:
            assert pod.process is not None
            grace = min(float(pod.template.spec.get("terminationGracePeriodSeconds", 30)), max_grace)
            try:
                codes[pod.name] = pod.process.wait(grace)
            except subprocess.TimeoutExpired:
                pod.signal(signal.SIGKILL)
                pod.process.wait(10)
                codes[pod.name] = None
        return codes

    def report(self) -> str:
        return "\n\n".join(p.describe() for p in self.pods if p.process is not None)
