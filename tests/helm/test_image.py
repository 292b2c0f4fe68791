"""The Dockerfile follows the image rules (static checks; tests/image builds and runs it):
slim multi-stage build, no build tools or pip in the final stage, a numeric non-root user that
matches the chart, the console-script entry points, and a build context (.dockerignore) that
holds exactly what the Dockerfile copies."""

from __future__ import annotations

import importlib.util
import re
import tomllib

from tests.helm.chart import ROOT, default_values, render

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def stages() -> list[list[str]]:
    """Instructions per stage (comments and continuation lines joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(line)
    return out


def test_multi_stage_slim_base() -> None:
    assert len(stages()) == 2
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim", DOCKERFILE, flags=re.M)
    for stage in stages():
        assert stage[0].startswith("FROM ${PYTHON_IMAGE}")


def test_final_stage_has_no_build_tools_and_runs_as_the_charts_user() -> None:
    final = " ".join(stages()[-1])
    for tool in ("gcc", "build-essential", "apt-get install", "pip install", "make "):
        assert tool not in final, tool
    assert "pip uninstall --yes pip" in final
    assert "COPY --from=build /opt/pocketmq /opt/pocketmq" in final
    user = re.search(r"\bUSER (\d+):(\d+)", final)
    assert user is not None, "USER must be numeric so runAsNonRoot can verify it"
    uid, gid = int(user.group(1)), int(user.group(2))
    assert uid != 0
    psc = default_values()["podSecurityContext"]
    assert (psc["runAsUser"], psc["runAsGroup"], psc["fsGroup"]) == (uid, gid, gid)
    assert "PATH=/opt/pocketmq/bin:$PATH" in final
    assert "WORKDIR /data" in final


def test_exposed_ports_are_the_charts_container_ports() -> None:
    exposed = {int(p) for line in stages()[-1] if line.startswith("EXPOSE") for p in line.split()[1:]}
    chart_ports = {int(p["containerPort"]) for pod in render({}).pod_templates() if pod.owner_kind != "Pod"
                   for c in pod.spec["containers"] for p in c["ports"]}
    assert exposed == chart_ports


def test_entry_points_exist() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {"pocketmq-namesrv", "pocketmq-broker", "pocketmq"} <= set(scripts)
    assert 'CMD ["pocketmq-namesrv"]' in DOCKERFILE
    # what the chart's containers run
    for pod in render({}).pod_templates():
        command = pod.spec["containers"][0]["command"]
        if command[:2] == ["python", "-m"]:
            module = command[2]
            assert module.startswith("services."), module
    assert importlib.util.find_spec("services.broker.k8s_env") is not None


def test_build_context_is_exactly_what_the_dockerfile_copies() -> None:
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*", "whitelist: exclude everything, then allow what is copied"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = set()
    for line in stages()[0]:
        if line.startswith("COPY ") and "--from" not in line:
            copied |= {src.rstrip("/") for src in line.split()[1:-1]}
    assert copied == allowed
    for path in copied:
        assert (ROOT / path).exists(), path
