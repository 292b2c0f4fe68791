"""Build the PocketMQ container image with Docker, or with podman where no Docker engine runs.

    python3 -m scripts.image build [--engine auto|docker|podman] [--tag pocketmq/pocketmq:0.1.0]
    python3 -m scripts.image engine      # which engine ``auto`` picks, or why none can run

The Dockerfile's base is its ``PYTHON_IMAGE`` default (``python:3.11-slim-bookworm``). Where that
cannot be pulled (no image registry) the base is a Debian rootfs of the same suite made here with
``mmdebstrap`` (Python 3 with venv, CA certificates, passwd, libstdc++) and imported into the engine; the
Dockerfile builds on both. Such a build reaches PyPI with the host's CA bundle mounted over the
base's (Debian's pip reads that file), so a proxy CA the host trusts works without changing the
image.

podman runs with the ``runc`` runtime when installed and a containers.conf setting
``default_ulimits = []`` (hosts that refuse podman's default nofile/nproc ulimits). Nothing of
either is baked into the image.

Cache (``--cache``, default ``$POCKETMQ_IMAGE_CACHE`` or ``~/.cache/pocketmq/image``): the Debian
base tarball, named by a hash of the mmdebstrap command, and imported as
``localhost/pocketmq-base:<suite>-<hash>`` (remove both to take Debian's updates). Built images
are also tagged ``<repository>:inputs-<hash>`` (hash of the Dockerfile, the build context and
the base image id), so an unchanged tree is tagged again instead of rebuilt.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEFAULT_TAG = "pocketmq/pocketmq:0.1.0"
ENGINES = ("auto", "docker", "podman")
BASES = ("auto", "python", "debian")
#: What the Debian base holds: what the Dockerfile's stages run (python -m venv, groupadd/useradd)
#: TLS roots, and the C++ runtime grpcio links against.
DEBIAN_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates", "passwd", "libstdc++6")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BASE_REPOSITORY = "localhost/pocketmq-base"
PULL_TIMEOUT_S = 60.0
CONTAINERS_CONF = """\
# Written by scripts/image.py for podman: no default ulimits (some hosts refuse podman's
# nofile/nproc defaults).
[containers]
default_ulimits = []
"""


class ImageError(RuntimeError):
    """The image cannot be built or run here; the message says why."""


def default_cache() -> Path:
    if os.environ.get("POCKETMQ_IMAGE_CACHE"):
        return Path(os.environ["POCKETMQ_IMAGE_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "pocketmq" / "image"


def _say(out: TextIO | None, text: str) -> None:
    if out is not None:
        print(f"[image] {text}", file=out, flush=True)


# -- engines ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Engine:
    """A container engine CLI: ``docker`` or ``podman`` (with its global flags and environment)."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def cmd(self, *args: str) -> list[str]:
        return [*self.argv, *args]

    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, *args: str, timeout: float | None = 120.0, check: bool = True,
            input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.cmd(*args), env=self.environ(), capture_output=True, text=True,
                              timeout=timeout, input=input_text)
        if check and done.returncode != 0:
            raise ImageError(f"`{' '.join(self.cmd(*args))}` exited {done.returncode}: "
                             f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done

    def stream(self, args: Sequence[str], out: TextIO | None, timeout: float) -> None:
        """Run showing the output (progress) on ``out``; raise with its tail on failure."""
        _stream(self.cmd(*args), out, timeout, self.environ())

    def image_id(self, ref: str) -> str | None:
        done = self.run("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        if done.returncode != 0:
            return None
        return done.stdout.strip() or None

    def image_size(self, ref: str) -> int:
        """Bytes of the image's layers, uncompressed (what ``<engine> images`` shows)."""
        return int(self.run("image", "inspect", "--format", "{{.Size}}", ref).stdout.strip())


def _stream(argv: Sequence[str], out: TextIO | None, timeout: float, env: Mapping[str, str]) -> None:
    tail: list[str] = []
    proc = subprocess.Popen(list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = [*tail[-40:], line.rstrip()]
            if out is not None:
                print(f"  {line.rstrip()}", file=out, flush=True)
        code = proc.wait()
    finally:
        watchdog.cancel()
    if code != 0:
        killed = f" (killed after {timeout:g}s)" if code == -signal.SIGKILL else ""
        raise ImageError(f"`{' '.join(argv)}` exited {code}{killed}:\n" + "\n".join(tail))


def docker_engine() -> Engine | str:
    """Docker if its daemon answers, else the reason it cannot be used."""
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    try:
        done = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 20 s"
    if done.returncode != 0 or not done.stdout.strip():
        why = (done.stderr.strip().splitlines() or ["no server version"])[-1]
        return f"the docker CLI cannot reach a Docker engine: {why}"
    return Engine("docker", ("docker",))


def podman_engine(cache: Path) -> Engine | str:
    """podman (runc runtime where installed, our containers.conf), else the reason it cannot be used."""
    if shutil.which("podman") is None:
        return "podman is not installed (`make setup` installs it: Debian packages podman, runc)"
    cache.mkdir(parents=True, exist_ok=True)
    conf = cache / "containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    argv = ("podman", "--runtime", "runc") if shutil.which("runc") else ("podman",)
    return Engine("podman", argv, {"CONTAINERS_CONF": str(conf)})


def engine(name: str = "auto", cache: Path | None = None) -> Engine:
    """The engine ``name`` ("auto": Docker if its engine answers, else podman). Raises ImageError
    saying why none can be used."""
    if name not in ENGINES:
        raise ImageError(f"unknown engine {name!r}; use one of {', '.join(ENGINES)}")
    cache = cache or default_cache()
    reasons = []
    for candidate in (("docker", "podman") if name == "auto" else (name,)):
        found = docker_engine() if candidate == "docker" else podman_engine(cache)
        if isinstance(found, Engine):
            return found
        reasons.append(f"{candidate}: {found}")
    raise ImageError("no container engine can be used: " + "; ".join(reasons))


def check_can_run(eng: Engine, image: str) -> None:
    """Run ``true`` in ``image`` as the tests run containers; raise with the engine's reason."""
    done = eng.run("run", "--rm", "--network", "host", image, "true", check=False, timeout=120)
    if done.returncode != 0:
        raise ImageError(f"{eng.name} cannot run containers here: `{' '.join(eng.cmd('run', '...'))}` "
                         f"exited {done.returncode}: {(done.stderr or done.stdout).strip()[-1500:]}")


# -- inputs and their hashes --------------------------------------------------------------------


def dockerfile_base() -> str:
    """The Dockerfile's ``ARG PYTHON_IMAGE`` default, e.g. ``python:3.11-slim-bookworm``."""
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)", DOCKERFILE.read_text(), flags=re.M)
    if match is None:
        raise ImageError("the Dockerfile has no `ARG PYTHON_IMAGE=<default base>`")
    return match.group(1)


def debian_suite(python_image: str) -> str:
    """The Debian suite a ``python:<ver>-slim-<suite>`` tag is built on."""
    suite = python_image.rsplit("-", 1)[-1]
    if not re.fullmatch(r"[a-z]+", suite) or suite == "slim":
        raise ImageError(f"cannot tell the Debian suite of {python_image!r}; "
                         "name the base as python:<version>-slim-<suite>")
    return suite


def _ignore_patterns() -> tuple[list[str], list[str]]:
    include: list[str] = []
    exclude: list[str] = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line == "*":
            continue
        (include if line.startswith("!") else exclude).append(line.lstrip("!").rstrip("/"))
    return include, exclude


def context_files() -> Iterator[Path]:
    """The files of the build context: what .dockerignore lets through (a whitelist)."""
    include, exclude = _ignore_patterns()

    def excluded(rel: str) -> bool:
        parts = rel.split("/")
        for pattern in exclude:
            bare = pattern.removeprefix("**/")
            if any(fnmatch.fnmatch(part, bare) for part in parts) or fnmatch.fnmatch(rel, pattern):
                return True
        return False

    for entry in sorted(include):
        path = ROOT / entry
        candidates = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in candidates:
            rel = file.relative_to(ROOT).as_posix()
            if file.is_file() and not excluded(rel):
                yield file


def inputs_hash(base_id: str, engine_name: str) -> str:
    digest = hashlib.sha256()
    digest.update(f"{engine_name}\0{base_id}\0".encode())
    for file in [DOCKERFILE, DOCKERIGNORE, *context_files()]:
        digest.update(file.relative_to(ROOT).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


# -- the Debian base ----------------------------------------------------------------------------


def mmdebstrap_args(suite: str) -> list[str]:
    """mmdebstrap's arguments but the output path: the smallest rootfs the Dockerfile builds on
    (essential packages with merged /usr, no docs/man pages/translations, no apt lists)."""
    drop = ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"]
    return [
        "--variant=essential",
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        f"--include={','.join(DEBIAN_PACKAGES)}",
        *[f"--dpkgopt=path-exclude={p}" for p in drop],
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*',
        suite,
    ]


def mmdebstrap_mirrors(suite: str) -> list[str]:
    return [f"deb {DEBIAN_MIRROR} {suite} main", f"deb {DEBIAN_MIRROR} {suite}-updates main",
            f"deb {DEBIAN_SECURITY_MIRROR} {suite}-security main"]


def debian_base(eng: Engine, suite: str, cache: Path, out: TextIO | None) -> str:
    """``localhost/pocketmq-base:<suite>-<hash>``: imported from the cached tarball, made first
    with mmdebstrap when missing."""
    args = mmdebstrap_args(suite)
    key = hashlib.sha256(json.dumps([args, mmdebstrap_mirrors(suite)]).encode()).hexdigest()[:16]
    ref = f"{BASE_REPOSITORY}:{suite}-{key}"
    if eng.image_id(ref):
        _say(out, f"base {ref} (cached image)")
        return ref
    tarball = cache / f"debian-{suite}-{key}.tar"
    if not tarball.exists():
        if shutil.which("mmdebstrap") is None:
            raise ImageError("mmdebstrap is not installed (`make setup` installs it) and the "
                             f"Dockerfile's base {dockerfile_base()} cannot be pulled")
        _say(out, f"making the Debian {suite} base rootfs with mmdebstrap -> {tarball}")
        started = time.monotonic()
        partial = tarball.with_suffix(f".partial-{os.getpid()}.tar")
        try:
            _stream(["mmdebstrap", *args, str(partial), *mmdebstrap_mirrors(suite)], out, 900, os.environ)
            partial.replace(tarball)
        finally:
            partial.unlink(missing_ok=True)
        for older in cache.glob(f"debian-{suite}-*.tar"):  # bases of other package lists
            if older != tarball and ".partial-" not in older.name:
                older.unlink(missing_ok=True)
        _say(out, f"base rootfs made in {time.monotonic() - started:.1f}s")
    _say(out, f"importing {tarball.name} as {ref}")
    eng.run("import", "--change", "CMD [\"python3\"]", str(tarball), ref, timeout=600)
    return ref


def base_image(eng: Engine, base: str, cache: Path, out: TextIO | None) -> tuple[str, bool]:
    """(image to build FROM, whether it is the Debian base made here)."""
    python_image = dockerfile_base()
    if base in ("auto", "python"):
        if eng.image_id(python_image):
            return python_image, False
        _say(out, f"pulling {python_image}")
        try:
            pulled = eng.run("pull", python_image, check=False, timeout=PULL_TIMEOUT_S)
            failure = (pulled.stderr or pulled.stdout).strip().splitlines()[-1:] if pulled.returncode else []
        except subprocess.TimeoutExpired:
            failure = [f"no answer within {PULL_TIMEOUT_S:g}s"]
        if not failure:
            return python_image, False
        if base == "python":
            raise ImageError(f"cannot pull {python_image}: {failure}")
        _say(out, f"cannot pull {python_image} ({' '.join(failure)}); using a Debian base made here")
    return debian_base(eng, debian_suite(python_image), cache, out), True


# -- build --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Built:
    ref: str
    image_id: str
    base: str
    size_bytes: int
    #: False when an image of the same inputs existed and was only tagged.
    built: bool
    seconds: float


def build(tag: str = DEFAULT_TAG, *, engine_name: str = "auto", base: str = "auto",
          cache: Path | None = None, out: TextIO | None = sys.stderr) -> tuple[Engine, Built]:
    """Build (or reuse) the image and tag it ``tag``."""
    if base not in BASES:
        raise ImageError(f"unknown base {base!r}; use one of {', '.join(BASES)}")
    started = time.monotonic()
    cache = cache or default_cache()
    cache.mkdir(parents=True, exist_ok=True)
    eng = engine(engine_name, cache)
    _say(out, f"engine: {' '.join(eng.argv)}")
    base_ref, debian = base_image(eng, base, cache, out)
    base_id = eng.image_id(base_ref) or base_ref
    key = inputs_hash(base_id, eng.name)[:16]
    repository = tag.rsplit(":", 1)[0] if ":" in tag.rsplit("/", 1)[-1] else tag
    inputs_tag = f"{repository}:inputs-{key}"
    built = eng.image_id(inputs_tag) is None
    if built:
        args = ["build", "--network", "host", "--build-arg", f"PYTHON_IMAGE={base_ref}",
                "-t", tag, "-t", inputs_tag, "-f", str(DOCKERFILE)]
        if eng.name == "podman":  # no image per instruction left behind (the inputs tag is the cache)
            args.append("--layers=false")
        if debian and eng.name == "podman" and HOST_CA_BUNDLE.is_file():
            # Debian's pip verifies PyPI against this file: the host's bundle (with any proxy CA
            # the host trusts) for the build only; the image keeps its own.
            args += ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]
        _say(out, f"building {tag} FROM {base_ref}")
        eng.stream([*args, str(ROOT)], out, 900)
        _forget_older_builds(eng, repository, inputs_tag, out)
    else:
        _say(out, f"{inputs_tag} is up to date; tagging it {tag}")
        eng.run("tag", inputs_tag, tag)
    image_id = eng.image_id(tag)
    if image_id is None:
        raise ImageError(f"{tag} is not in {eng.name}'s image store after the build")
    result = Built(tag, image_id, base_ref, eng.image_size(tag), built, time.monotonic() - started)
    _say(out, f"{tag} {image_id[:12]} {result.size_bytes / 1e6:.0f} MB, "
              f"{'built' if built else 'cached'} in {result.seconds:.1f}s (base {base_ref})")
    return eng, result


def _forget_older_builds(eng: Engine, repository: str, keep: str, out: TextIO | None) -> None:
    """Untag (and so delete, unless still tagged or used) earlier ``inputs-`` builds."""
    listed = eng.run("images", "--format", "{{.Repository}}:{{.Tag}}", repository, check=False).stdout
    keep_tag = keep.rsplit(":", 1)[1]
    old = [ref for ref in listed.split() if ref.rsplit(":", 1)[-1].startswith("inputs-")
           and ref.rsplit(":", 1)[-1] != keep_tag]
    if old:
        _say(out, f"removing earlier builds: {' '.join(old)}")
        eng.run("rmi", *old, check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m scripts.image", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or reuse) the image")
    b.add_argument("--tag", default=DEFAULT_TAG)
    b.add_argument("--base", choices=BASES, default="auto",
                   help="python: the Dockerfile's default; debian: a base made with mmdebstrap; "
                        "auto: python when it can be pulled (default)")
    e = sub.add_parser("engine", help="print the engine `auto` (or --engine) picks")
    for p in (b, e):
        p.add_argument("--engine", choices=ENGINES, default=os.environ.get("POCKETMQ_IMAGE_ENGINE", "auto"))
        p.add_argument("--cache", type=Path, default=default_cache())
    args = parser.parse_args(argv)
    try:
        if args.command == "engine":
            print(" ".join(engine(args.engine, args.cache).argv))
            return 0
        build(args.tag, engine_name=args.engine, base=args.base, cache=args.cache)
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
