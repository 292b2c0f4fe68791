"""What scripts/image.py hashes and derives, checked without a container engine."""

from __future__ import annotations

import pytest

from scripts import image
from tests.image.containers import cpus_flag, memory_flag


def test_the_context_is_what_dockerignore_lets_through() -> None:
    files = {p.relative_to(image.ROOT).as_posix() for p in image.context_files()}
    assert {"pyproject.toml", "README.md", "requirements/lock.txt", "pocketmq/__init__.py",
            "services/broker/k8s_env.py"} <= files
    top = {"pyproject.toml", "README.md", "requirements", "pocketmq", "services", "apache"}
    assert all(f.split("/")[0] in top for f in files)
    assert "apache/rocketmq/v2/service_pb2.py" in files
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc") or ".egg-info" in f]
    assert "requirements/top.txt" not in files


def test_the_debian_base_follows_the_dockerfiles_base() -> None:
    assert image.dockerfile_base().startswith("python:3.11-slim-")
    assert image.debian_suite("python:3.11-slim-bookworm") == "bookworm"
    with pytest.raises(image.ImageError, match="suite"):
        image.debian_suite("python:3.11-slim")
    args = image.mmdebstrap_args("bookworm")
    assert args[-1] == "bookworm" and any(a.startswith("--include=") and "python3-venv" in a for a in args)


def test_inputs_hash_depends_on_base_and_engine() -> None:
    one = image.inputs_hash("sha256:a", "podman")
    assert one == image.inputs_hash("sha256:a", "podman")
    assert one != image.inputs_hash("sha256:b", "podman")
    assert one != image.inputs_hash("sha256:a", "docker")


def test_kubernetes_quantities_become_engine_flags() -> None:
    assert memory_flag("2Gi") == str(2 * 2**30)
    assert memory_flag("512Mi") == str(512 * 2**20)
    assert memory_flag("1G") == str(10**9)
    assert cpus_flag("500m") == "0.5"
    assert cpus_flag("2") == "2"
