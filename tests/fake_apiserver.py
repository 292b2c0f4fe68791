"""A minimal stand-in for the Kubernetes API server, enough for ``controllerMode=kubernetes``
and the brokers' pod labels, enforcing what the Lease logic relies on: a create fails with 409
AlreadyExists when the Lease exists, and a replace whose ``metadata.resourceVersion`` is not the
stored one (or missing) fails with 409 Conflict.  Every stored change takes a new
resourceVersion.  Pods (added by the test) take merge patches of their labels.

Used by the unit tests of the Lease logic and by the real-process failover tests (the brokers
point ``controllerK8sApiServer`` at :attr:`FakeApiServer.url`)."""

from __future__ import annotations

import http.server
import json
import re
import threading
from typing import Any

_LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/?]+))?")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/?]+)")


class FakeApiServer:
    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        #: Writes refused with 409 (AlreadyExists or a stale resourceVersion).
        self.conflicts = 0
        #: Requests served, by method.
        self.requests: dict[str, int] = {}
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, code: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str) -> None:
                self._reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                                   "reason": reason})

            def _body(self) -> dict[str, Any]:
                return dict(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

            def _count(self) -> None:
                with outer.lock:
                    outer.requests[self.command] = outer.requests.get(self.command, 0) + 1

            def do_GET(self) -> None:
                self._count()
                if m := _PODS.match(self.path):
                    with outer.lock:
                        obj = outer.pods.get((m.group(1), m.group(2)))
                elif m := _LEASES.match(self.path):
                    with outer.lock:
                        obj = outer.leases.get((m.group(1), m.group(2) or ""))
                else:
                    obj = None
                if obj is None:
                    self._status(404, "NotFound")
                else:
                    self._reply(200, obj)

            def do_POST(self) -> None:
                self._count()
                m = _LEASES.match(self.path)
                if m is None:
                    self._status(404, "NotFound")
                    return
                body = self._body()
                key = (m.group(1), body["metadata"]["name"])
                with outer.lock:
                    if key in outer.leases:
                        outer.conflicts += 1
                        self._status(409, "AlreadyExists")
                        return
                    outer.version += 1
                    body["metadata"]["resourceVersion"] = str(outer.version)
                    outer.leases[key] = body
                self._reply(201, body)

            def do_PUT(self) -> None:
                self._count()
                m = _LEASES.match(self.path)
                if m is None:
                    self._status(404, "NotFound")
                    return
                body = self._body()
                key = (m.group(1), m.group(2) or "")
                with outer.lock:
                    stored = outer.leases.get(key)
                    if stored is None:
                        self._status(404, "NotFound")
                        return
                    if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
                        outer.conflicts += 1
                        self._status(409, "Conflict")
                        return
                    outer.version += 1
                    body["metadata"]["resourceVersion"] = str(outer.version)
                    outer.leases[key] = body
                self._reply(200, body)

            def do_PATCH(self) -> None:
                self._count()
                m = _PODS.match(self.path)
                if m is None or "merge-patch" not in self.headers.get("Content-Type", ""):
                    self._status(415 if m else 404, "UnsupportedMediaType" if m else "NotFound")
                    return
                patch = self._body()
                with outer.lock:
                    pod = outer.pods.get((m.group(1), m.group(2)))
                    if pod is None:
                        self._status(404, "NotFound")
                        return
                    labels = pod["metadata"].setdefault("labels", {})
                    for name, value in (patch.get("metadata", {}).get("labels") or {}).items():
                        if value is None:
                            labels.pop(name, None)
                        else:
                            labels[name] = value
                    outer.version += 1
                    pod["metadata"]["resourceVersion"] = str(outer.version)
                self._reply(200, pod)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def add_pod(self, namespace: str, name: str, labels: dict[str, str] | None = None) -> None:
        with self.lock:
            self.pods[(namespace, name)] = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": namespace, "labels": dict(labels or {}), "resourceVersion": "0"}}

    def pod_labels(self, namespace: str, name: str) -> dict[str, str]:
        with self.lock:
            return dict(self.pods[(namespace, name)]["metadata"].get("labels") or {})

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            found = self.leases.get((namespace, name))
            return json.loads(json.dumps(found)) if found is not None else None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
