"""A minimal stand-in for the Kubernetes API server's Lease endpoints, enforcing what the
election relies on: create fails with 409 when the Lease exists, and a replace whose
``metadata.resourceVersion`` is not the stored one fails with 409 Conflict."""

from __future__ import annotations

import http.server
import json
import re
import threading
from typing import Any

_PATH = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/?]+))?")


class FakeLeaseServer:
    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.conflicts = 0
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

            def do_GET(self) -> None:
                m = _PATH.match(self.path)
                assert m
                with outer.lock:
                    lease = outer.leases.get((m.group(1), m.group(2) or ""))
                if lease is None:
                    self._status(404, "NotFound")
                else:
                    self._reply(200, lease)

            def do_POST(self) -> None:
                m = _PATH.match(self.path)
                assert m
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
                m = _PATH.match(self.path)
                assert m
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

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
