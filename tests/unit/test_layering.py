"""Layering: the client packages never load server code, and the server imports from
``pocketmq`` only the generated gRPC code and the pure wire package."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What services/ may import from pocketmq: generated gRPC packages and the wire package.
ALLOWED = re.compile(r"^pocketmq(\.[a-z_]+\.v1(\..*)?|\.wire(\..*)?)$|^apache\.rocketmq\.v2(\..*)?$")


def test_client_packages_load_no_server_module() -> None:
    code = (
        "import json, sys\n"
        "import pocketmq, pocketmq.client, pocketmq.spark, pocketmq.cli, pocketmq.wire\n"
        "import pocketmq.client.consumer, pocketmq.client.producer, pocketmq.client.admin\n"
        "import pocketmq.spark.reader, pocketmq.spark.columnar, pocketmq.spark.writer\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    modules = json.loads(out)
    assert "pocketmq.client.consumer" in modules and "pocketmq.spark.columnar" in modules
    assert [m for m in modules if m == "services" or m.startswith("services.")] == []


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)]
            # "from pocketmq import client" names a module too
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if node.module == "pocketmq"]
    return found


def test_services_import_only_generated_code_and_the_wire_package_from_pocketmq() -> None:
    files = sorted((ROOT / "services").rglob("*.py"))
    assert files
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}"
           for path in files for line, name in _imports(path)
           if (name == "pocketmq" or name.startswith("pocketmq.") or name.startswith("apache."))
           and not ALLOWED.match(name)]
    assert bad == []


def test_the_static_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("from pocketmq.client import tags\nimport pocketmq.errors\nfrom pocketmq import wire\n"
                      "from pocketmq.broker.v1 import broker_pb2\n")
    names = [name for _, name in _imports(sample)]
    assert [n for n in names if not ALLOWED.match(n)] == ["pocketmq.client", "pocketmq.errors", "pocketmq"]
