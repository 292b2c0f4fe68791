"""A real Prometheus (Debian package) scraping a :class:`LocalCluster`, configured the way the
prometheus-operator turns the rendered ServiceMonitor and PrometheusRule into configuration:
one target per pod behind each selected Service's named port, labelled ``namespace``,
``service``, ``pod``, ``container``, ``endpoint`` and ``job`` (the Service label named by
``jobLabel``, else the Service name); the PrometheusRule's groups as a rule file."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.helm.chart import selector_matches
from tests.helm.localpods import LocalCluster
from tests.support import free_port, require_executable


def scrape_configs(cluster: LocalCluster) -> list[dict[str, Any]]:
    """What the operator generates for the cluster's ServiceMonitors (static targets)."""
    configs = []
    for sm in cluster.manifests.of_kind("ServiceMonitor"):
        spec = sm["spec"]
        namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [sm["metadata"]["namespace"]]
        for n, endpoint in enumerate(spec["endpoints"]):
            static = []
            for svc in cluster.manifests.of_kind("Service"):
                if cluster.namespace not in namespaces:
                    continue
                if not selector_matches(spec["selector"], svc["metadata"].get("labels", {})):
                    continue
                port = next((p for p in svc["spec"]["ports"] if p.get("name") == endpoint["port"]), None)
                if port is None:
                    continue
                job = svc["metadata"]["labels"].get(spec.get("jobLabel", ""), svc["metadata"]["name"])
                for pod in cluster._selected(svc["spec"]["selector"]):
                    target = port["targetPort"]
                    number = pod.template.port(target) if isinstance(target, str) else int(target)
                    static.append({"targets": [f"{pod.ip}:{number}"], "labels": {
                        "namespace": cluster.namespace, "service": svc["metadata"]["name"], "pod": pod.name,
                        "container": pod.template.spec["containers"][0]["name"],
                        "endpoint": endpoint["port"], "job": job}})
            config: dict[str, Any] = {
                "job_name": f"serviceMonitor/{sm['metadata']['namespace']}/{sm['metadata']['name']}/{n}",
                "metrics_path": endpoint.get("path", "/metrics"),
                "scheme": endpoint.get("scheme", "http"),
                "honor_labels": endpoint.get("honorLabels", False),
                "static_configs": static,
            }
            for key, field in (("interval", "scrape_interval"), ("scrapeTimeout", "scrape_timeout")):
                if endpoint.get(key):
                    config[field] = endpoint[key]
            configs.append(config)
    return configs


class Prometheus:
    """``prometheus`` on a free loopback port with the cluster's scrape and rule config."""

    def __init__(self, cluster: LocalCluster, workdir: Path, evaluation_interval: str = "1s") -> None:
        self.binary = require_executable("prometheus", "prometheus")
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        rule_files = []
        for rule in cluster.manifests.of_kind("PrometheusRule"):
            path = workdir / f"rules-{rule['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
            rule_files.append(str(path))
        self.scrape = scrape_configs(cluster)
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": evaluation_interval},
                  "rule_files": rule_files, "scrape_configs": self.scrape}
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={self.config_path}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=1h"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.log_path.read_text()[-3000:]}")
            ready = self.url + "/-/ready"
            with contextlib.suppress(OSError), urllib.request.urlopen(ready, timeout=1) as reply:
                if reply.status == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (raises for a PromQL error)."""
        try:
            data = self.api("query", query=expr)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"query failed: {expr}\n{exc.read().decode(errors='replace')}") from None
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return active

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
