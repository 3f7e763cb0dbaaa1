"""The JDK and Maven the reference launcher needs, and the Apache RocketMQ classpath it resolves.

Everything is installed on first use (Debian packages, Maven Central through ``mvn``), so a fresh
machine needs nothing by hand. The classpath that ``mvn dependency:build-classpath`` prints is
cached per pom and local repository, because a warm ``mvn`` still costs ~10 s of JVM time on a
2-core machine, and re-resolved when any cached jar is gone.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

APACHE_POM = Path(__file__).with_name("apache") / "pom.xml"
# a separate local repository (e.g. to measure a cold fetch) without touching ~/.m2
MAVEN_REPO_ENV = "FERRYMQ_MAVEN_REPO"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ferrymq-interop"
_JAVA_MAJOR = re.compile(r'version "(\d+)')
MIN_JAVA = 17


class ToolError(RuntimeError):
    """A tool could not be installed or a Maven build failed; the message says which and why."""


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One process at a time (pytest workers, other engineers' runs) installs or resolves."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def java_major(java: str = "java") -> int:
    """The major version of ``java`` (``java -version`` prints it on stderr); 0 if it is absent."""
    if shutil.which(java) is None:
        return 0
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = _JAVA_MAJOR.search(out.stderr + out.stdout)
    return int(match.group(1)) if match else 0


def ensure_java_tools() -> None:
    """Install a JDK 17 (javac too: the scenario module is compiled) and Maven where missing."""
    if java_major() >= MIN_JAVA and shutil.which("javac") and shutil.which("mvn"):
        return
    with _locked("apt"):
        if java_major() >= MIN_JAVA and shutil.which("javac") and shutil.which("mvn"):
            return
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for argv in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "openjdk-17-jdk-headless", "maven"],
        ):
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise ToolError(
                    f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}"
                )
    if java_major() < MIN_JAVA:
        raise ToolError(
            f"java is {java_major()} after installing openjdk-17; Java {MIN_JAVA}+ needed"
        )


def maven_repo() -> Path | None:
    value = os.environ.get(MAVEN_REPO_ENV)
    return Path(value).resolve() if value else None


def mvn(args: list[str], cwd: Path, *, timeout: float = 1200) -> str:
    """Run Maven in batch mode (against :func:`maven_repo` when set); its output, or ToolError
    with the tail of the log."""
    ensure_java_tools()
    argv = ["mvn", "-B", "-q", *args]
    repo = maven_repo()
    if repo is not None:
        argv.append(f"-Dmaven.repo.local={repo}")
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise ToolError(f"mvn {' '.join(args)} in {cwd} failed ({done.returncode}):\n{tail}")
    return done.stdout


def _cache_key(pom: Path) -> str:
    digest = hashlib.sha256(pom.read_bytes())
    digest.update(str(maven_repo() or Path.home() / ".m2").encode())
    return digest.hexdigest()[:16]


def resolve_classpath(pom: Path = APACHE_POM) -> str:
    """The runtime classpath of ``pom``'s dependencies (jars in the local Maven repository),
    fetched from Maven Central on first use and cached."""
    cache = CACHE_DIR / f"classpath-{pom.parent.name}-{_cache_key(pom)}.txt"

    def cached() -> str | None:
        if not cache.exists():
            return None
        text = cache.read_text().strip()
        if text and all(Path(jar).is_file() for jar in text.split(os.pathsep)):
            return text
        return None

    if (hit := cached()) is not None:
        ensure_java_tools()
        return hit
    with _locked("maven"):
        if (hit := cached()) is not None:
            return hit
        out = CACHE_DIR / f"{cache.stem}.tmp"
        mvn(
            [
                "dependency:build-classpath",
                f"-Dmdep.outputFile={out}",
                "-Dmdep.includeScope=runtime",
            ],
            pom.parent,
        )
        out.replace(cache)
    text = cached()
    if text is None:
        raise ToolError(f"mvn resolved {pom} but the classpath in {cache} names missing jars")
    return text


def _tree_digest(root: Path, extra: str) -> str:
    digest = hashlib.sha256(extra.encode())
    for path in sorted(root.rglob("*")):
        if path.is_file() and "target" not in path.relative_to(root).parts:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_module(module: Path, profile: str, build_dir: str) -> str:
    """Compile the Maven module at ``module`` with ``-P<profile>`` (into ``target/<build_dir>``)
    and return its runtime classpath (classes first). Rebuilt only when a source or the pom
    changed, or a jar of the cached classpath is gone."""
    key = _tree_digest(module, f"{profile}:{maven_repo()}")
    classes = module / "target" / build_dir / "classes"
    stamp = CACHE_DIR / f"module-{module.name}-{profile}-{key}.txt"

    def cached() -> str | None:
        if not stamp.exists() or not classes.is_dir():
            return None
        text = stamp.read_text().strip()
        if all(Path(p).exists() for p in text.split(os.pathsep)):
            return text
        return None

    if (hit := cached()) is not None:
        ensure_java_tools()
        return hit
    with _locked(f"build-{module.name}"):
        if (hit := cached()) is not None:
            return hit
        deps = CACHE_DIR / f"{stamp.stem}.deps"
        mvn(
            [
                f"-P{profile}",
                "compile",
                "dependency:build-classpath",
                f"-Dmdep.outputFile={deps}",
                "-Dmdep.includeScope=runtime",
            ],
            module,
        )
        stamp.write_text(f"{classes}{os.pathsep}{deps.read_text().strip()}")
    text = cached()
    if text is None:
        raise ToolError(f"mvn compiled {module} (-P{profile}) but {classes} or a jar is missing")
    return text


GO_FALLBACK = Path("/usr/local/go/bin/go")  # where the Go toolchain sits when not on PATH


def ensure_go() -> str:
    """The ``go`` command: on PATH, at /usr/local/go, or Debian's golang-go installed now."""
    for candidate in (shutil.which("go"), GO_FALLBACK if GO_FALLBACK.exists() else None):
        if candidate:
            return str(candidate)
    with _locked("apt"):
        if (found := shutil.which("go")) is None:
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            for argv in (
                ["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "golang-go"],
            ):
                done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise ToolError(
                        f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}"
                    )
            found = shutil.which("go")
    if found is None:
        raise ToolError("go is not on PATH after installing golang-go")
    return found


def build_go_module(module: Path, *, timeout: float = 900) -> Path:
    """``go build`` the main package at ``module`` (its go.mod and go.sum pin every dependency,
    fetched from the Go module proxy) into a binary cached under ``CACHE_DIR``, named by a digest
    of the sources, go.mod, go.sum and the Go version: built again only when one changed."""
    go = ensure_go()
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True)
    binary = CACHE_DIR / f"go-{module.name}-{_tree_digest(module, version.stdout.strip())}"
    if binary.exists():
        return binary
    with _locked(f"build-go-{module.name}"):
        if binary.exists():
            return binary
        partial = binary.with_suffix(".tmp")
        done = subprocess.run(
            [go, "build", "-mod=readonly", "-buildvcs=false", "-trimpath", "-o", str(partial), "."],
            cwd=module,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise ToolError(
                f"go build in {module} failed ({done.returncode}):\n{done.stderr[-4000:]}"
            )
        partial.replace(binary)
    return binary
