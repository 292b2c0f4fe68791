"""The chart's rendered pods as containers of the built image (Docker or podman).

:class:`ContainerCluster` is the helm harness's :class:`~tests.helm.localpods.LocalCluster` with
one change: a pod is started as ``<engine> run <image> <command> <args>`` instead of a local
process. Command, args and env are the rendered ones after the harness's rewrites (pod IPs on
loopback, cluster DNS, headless NameServer lists); mountPaths are kept, and each volume's local
directory is mounted there. What the pod spec asks of the runtime is passed on:

- ``--network host``: the pod IPs (127.x.y.n) are the host's loopback addresses;
- ``runAsUser``/``runAsGroup`` as ``--user``, ``fsGroup`` as a supplementary group owning the
  writable volumes (setgid, group-writable, as the kubelet prepares them);
- ``readOnlyRootFilesystem`` as ``--read-only`` (podman: without its default tmpfs mounts, so
  only the pod's volumes are writable), ``capabilities.drop`` as ``--cap-drop``,
  ``allowPrivilegeEscalation: false`` as ``no-new-privileges``, resource limits as
  ``--memory``/``--cpus``;
- the pod name as ``HOSTNAME`` (podman: also as the container's host name);
- termination: ``<engine> stop -t <terminationGracePeriodSeconds>`` (SIGTERM, the image's
  STOPSIGNAL, then SIGKILL), timed per container.

Not emulated: the preStop hook (the kubelet's sleep before SIGTERM), probes after readiness,
restarts.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from scripts.image import Engine
from tests.helm.chart import Manifests
from tests.helm.localpods import ClusterError, LocalCluster, LocalPod

#: Figures the image tests measured, printed at the end of the run (see conftest.py).
FIGURES: dict[str, str] = {}


def memory_flag(quantity: str) -> str:
    """A Kubernetes memory quantity (``512Mi``, ``2Gi``, ``1G``, bytes) as bytes for ``--memory``."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9,
             "T": 10**12}
    for suffix, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if quantity.endswith(suffix):
            return str(int(float(quantity[: -len(suffix)]) * factor))
    return str(int(quantity))


def cpus_flag(quantity: str) -> str:
    """A Kubernetes CPU quantity (``500m``, ``2``) as a ``--cpus`` value."""
    return f"{int(quantity[:-1]) / 1000:g}" if quantity.endswith("m") else f"{float(quantity):g}"


class ContainerCluster(LocalCluster):
    """The pods of ``manifests`` as containers of ``image`` run by ``engine``."""

    def __init__(self, manifests: Manifests, workdir: Path, namespace: str, engine: Engine,
                 image: str) -> None:
        super().__init__(manifests, workdir, namespace, keep_mount_paths=True)
        self.engine = engine
        self.image = image
        self.run_id = uuid.uuid4().hex[:8]
        #: pod name -> container name; pod name -> monotonic time of ``<engine> run``.
        self.containers: dict[str, str] = {}
        self.started: dict[str, float] = {}
        #: pod name -> seconds from ``<engine> stop`` to the container's exit.
        self.stop_seconds: dict[str, float] = {}

    # -- the container a pod becomes ------------------------------------------------------------

    def container_name(self, pod: LocalPod) -> str:
        return f"pmq-{self.run_id}-{pod.name}"[:63]

    def security(self, pod: LocalPod) -> dict[str, Any]:
        """The effective security settings (container securityContext over the pod's)."""
        (container,) = pod.template.spec["containers"]
        pod_level = pod.template.spec.get("securityContext") or {}
        return {**pod_level, **(container.get("securityContext") or {})}

    def grace(self, pod: LocalPod) -> int:
        return int(pod.template.spec.get("terminationGracePeriodSeconds", 30))

    def run_args(self, pod: LocalPod) -> list[str]:
        (container,) = pod.template.spec["containers"]
        sc = self.security(pod)
        args = ["run", "--name", self.container_name(pod), "--network", "host", "--pull", "never",
                "--sig-proxy=false", "--env", f"HOSTNAME={pod.name}"]
        if self.engine.name == "podman":  # Docker refuses a hostname with the host network
            args += ["--hostname", pod.name]
        if "runAsUser" in sc:
            args += ["--user", f"{sc['runAsUser']}:{sc['runAsGroup']}" if "runAsGroup" in sc
                     else str(sc["runAsUser"])]
        if "fsGroup" in sc:
            args += ["--group-add", str(sc["fsGroup"])]
        if sc.get("readOnlyRootFilesystem"):
            args += ["--read-only"]
            if self.engine.name == "podman":
                args += ["--read-only-tmpfs=false"]
        for cap in (sc.get("capabilities") or {}).get("drop", []):
            args += ["--cap-drop", cap]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        limits = (container.get("resources") or {}).get("limits") or {}
        if "memory" in limits:
            args += ["--memory", memory_flag(str(limits["memory"]))]
        if "cpu" in limits:
            args += ["--cpus", cpus_flag(str(limits["cpu"]))]
        for mount in container.get("volumeMounts", []):
            local = pod.mounts[mount["mountPath"]]
            args += ["--volume", f"{local}:{mount['mountPath']}" + (":ro" if mount.get("readOnly") else "")]
        for key, value in pod.spec_env.items():
            args += ["--env", f"{key}={value}"]
        return [*args, self.image, *pod.argv]

    def _prepare_volumes(self, pod: LocalPod) -> None:
        """What the kubelet does for fsGroup: writable volumes group-owned by it, setgid."""
        (container,) = pod.template.spec["containers"]
        fs_group = self.security(pod).get("fsGroup")
        for mount in container.get("volumeMounts", []):
            local = pod.mounts[mount["mountPath"]]
            if fs_group is not None and not mount.get("readOnly"):
                os.chown(local, -1, int(fs_group))
                local.chmod(0o2775)
            else:
                local.chmod(0o755)

    # -- lifecycle (overrides) ------------------------------------------------------------------

    def _launch(self, pod: LocalPod) -> None:
        self._prepare(pod)
        self._prepare_volumes(pod)
        pod.log_path = pod.dir / "log.txt"
        name = self.container_name(pod)
        self.containers[pod.name] = name
        self.engine.run("rm", "--force", name, check=False)
        self.started[pod.name] = time.monotonic()
        with open(pod.log_path, "ab") as log:
            pod.process = subprocess.Popen(self.engine.cmd(*self.run_args(pod)), env=self.engine.environ(),
                                           stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)

    def exec(self, pod: LocalPod, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the pod's running container (as its user)."""
        return self.engine.run("exec", self.containers[pod.name], *argv, check=False, timeout=timeout)

    def run_to_completion(self, pod: LocalPod, timeout: float) -> int:
        self._launch(pod)
        assert pod.process is not None
        try:
            return pod.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.engine.run("rm", "--force", self.containers[pod.name], check=False)
            raise ClusterError(f"{pod.name} did not finish within {timeout:g}s\n{pod.describe()}") from None

    def stop(self, pods: Iterable[LocalPod] | None = None, max_grace: float = 120.0) -> dict[str, int | None]:
        """``<engine> stop -t <terminationGracePeriodSeconds>`` for every chosen container at
        once. Returns pod -> the container's exit code (137 = SIGKILLed at the end of its grace
        period; None = it did not exit at all)."""
        chosen = [p for p in (list(pods) if pods is not None else self.pods)
                  if p.process is not None and p.process.poll() is None]
        stoppers: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
        for pod in chosen:
            grace = min(self.grace(pod), int(max_grace))
            stoppers[pod.name] = (subprocess.Popen(
                self.engine.cmd("stop", "-t", str(grace), self.containers[pod.name]),
                env=self.engine.environ(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                time.monotonic())
        codes: dict[str, int | None] = {}
        for pod in chosen:
            assert pod.process is not None
            stopper, since = stoppers[pod.name]
            try:
                codes[pod.name] = pod.process.wait(min(self.grace(pod), max_grace) + 30)
            except subprocess.TimeoutExpired:
                codes[pod.name] = None
            self.stop_seconds[pod.name] = time.monotonic() - since
            stopper.wait(30)
        return codes

    def remove(self) -> None:
        """Remove every container this cluster started (running or not)."""
        names = list(self.containers.values())
        if names:
            self.engine.run("rm", "--force", *names, check=False, timeout=180)
        for pod in self.pods:
            if pod.process is not None and pod.process.poll() is None:
                pod.process.kill()
                pod.process.wait(10)
