# syntax=docker/dockerfile:1
# PocketMQ: one image for the NameServer, the brokers and the `pocketmq` CLI.
#
#   docker build -t pocketmq/pocketmq:0.1.0 .          # or `make image` (Docker or podman)
#   docker run --rm pocketmq/pocketmq:0.1.0                                  # a NameServer
#   docker run --rm pocketmq/pocketmq:0.1.0 pocketmq-broker -c broker.conf   # a broker
#
# Entry points (console scripts on PATH): pocketmq-namesrv, pocketmq-broker, pocketmq; the Helm
# chart runs the same code as `python -m services.namesrv` / `python -m services.broker`.
# The final stage has no compiler, no pip and runs as the unprivileged user 10001 with
# a read-only root filesystem in mind (it writes only to /data and /tmp).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtual environment with the project and its runtime dependencies ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/pocketmq
WORKDIR /src
COPY requirements/lock.txt requirements/lock.txt
COPY pyproject.toml README.md ./
COPY pocketmq pocketmq
COPY services services
COPY apache apache
# Runtime dependencies plus the k8s extra (pod self-labelling) at the lock file's exact versions;
# all of them ship binary wheels, so no build tools are needed even here. The Kubernetes client's
# asyncio copy (kubernetes/aio, about 70 MB) is removed: self-labelling uses the blocking client.
# NumPy (the broker's vectorised store paths) keeps what `import numpy` loads: its test suites,
# C headers, SIMD test module, f2py, distutils and type stubs (about 26 MB) are removed.
RUN /opt/pocketmq/bin/pip install --prefer-binary --constraint requirements/lock.txt ".[k8s]" \
 && rm -rf /opt/pocketmq/lib/python3*/site-packages/kubernetes/aio \
 && cd /opt/pocketmq/lib/python3*/site-packages/numpy \
 && find . -depth -type d -name tests -exec rm -rf {} + \
 && rm -rf f2py distutils _pyinstaller random/_examples _core/include _core/_simd.*.so \
 && find . -name '*.pyi' -delete \
 && cd / \
 && /opt/pocketmq/bin/python -m compileall -q -j 0 /opt/pocketmq/lib \
 && /opt/pocketmq/bin/python -m pip uninstall --yes pip setuptools

# ---- runtime ----
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="PocketMQ" \
      org.opencontainers.image.description="RocketMQ-style message system in Python: NameServer, brokers, CLI" \
      org.opencontainers.image.licenses="Apache-2.0"
# python:3.11-slim ships pip/setuptools/wheel in the system Python: removed. A Debian base
# (scripts/image.py builds one where python:3.11-slim cannot be pulled) has no system pip.
RUN if python -m pip --version >/dev/null 2>&1; then python -m pip uninstall --yes pip setuptools wheel; fi \
 && groupadd --system --gid 10001 pocketmq \
 && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
            --shell /usr/sbin/nologin pocketmq \
 && mkdir -p /data \
 && chown 10001:10001 /data
COPY --from=build /opt/pocketmq /opt/pocketmq
ENV PATH=/opt/pocketmq/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /data
USER 10001:10001
# NameServer gRPC + metrics; broker gRPC, HA (replication) and metrics.
EXPOSE 9876 9877 10911 10912 10913
# Both services stop gracefully on SIGTERM (flush, unregister) and run as PID 1 without a shell.
STOPSIGNAL SIGTERM
CMD ["pocketmq-namesrv"]
