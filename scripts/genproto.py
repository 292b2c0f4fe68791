"""Generate the checked-in Python protobuf/gRPC code from proto/ (``make proto``).

``proto/<package path>/x.proto`` (``pocketmq/<api>/v1``, ``apache/rocketmq/v2``) ->
``<package path>/x_pb2.py``, ``x_pb2.pyi`` and ``x_pb2_grpc.py``: the proto package is the
Python import path. ``--check`` regenerates into a
temporary directory and exits 1 when the checked-in files are stale (the test suite runs it).
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.rglob("*.proto"))


def generate(out: Path) -> list[Path]:
    """Run protoc for every proto file into ``out``; return the generated paths (relative)."""
    include = str(resources.files("grpc_tools") / "_proto")
    files = [str(p.relative_to(PROTO_DIR)) for p in proto_files()]
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    generated = sorted(p.relative_to(out) for p in out.rglob("*_pb2*.py*"))
    # Every directory on the way becomes a package (path = import path).
    for rel in generated:
        for parent in rel.parents:
            if parent != Path(".") and not (out / parent / "__init__.py").exists():
                (out / parent / "__init__.py").touch()
    return generated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if checked-in code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generated = generate(out)
        stale = [
            rel for rel in generated
            if not (ROOT / rel).exists() or not filecmp.cmp(out / rel, ROOT / rel, shallow=False)
        ]
        if args.check:
            for rel in stale:
                print(f"stale generated file: {rel} (run 'make proto')", file=sys.stderr)
            return 1 if stale else 0
        for rel in generated:
            target = ROOT / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            for parent in rel.parents:
                if parent != Path("."):
                    (ROOT / parent / "__init__.py").touch(exist_ok=True)
            target.write_bytes((out / rel).read_bytes())
            print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
