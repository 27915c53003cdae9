"""Build llama.cpp's converter and CPU binaries offline, into dragonfarm's cache folder.

    dragonfarm build-llama-cpp                  # download (pip), unpack, build; or reuse
    dragonfarm build-llama-cpp --sdist FILE     # from a copy of the source distribution
    dragonfarm build-llama-cpp --portable       # no -march=native (a cache to carry)
    build_llama_cpp()                           # the same from Python; the folder it built

llama.cpp's source travels inside the llama-cpp-python source distribution (vendor/llama.cpp).
The build fetches that sdist at the pinned version with pip (the machine's own package index
configuration, no other download), checks its sha256, unpacks vendor/llama.cpp into
`llama_cpp.cache_dir()` (~/.cache/dragonfarm/llama.cpp-<version>) and builds llama-server,
llama-quantize and llama-cli with cmake: CPU only, static, no OpenSSL, no web UI download, no
tests or examples (about 10 minutes on 2 cores). The marker written last
(`.dragonfarm-built.json`) says the build is complete; a complete cache for this CPU is reused
at once, an interrupted one is resumed (cmake rebuilds only what is missing), and a lock file
beside the folder keeps a second build out while one runs. dragonfarm finds the result without
being told (`dragonfarm check` shows where). The converter needs no install: it runs with
dragonfarm's own Python and the tree's gguf-py; llama.cpp's requirements files are deliberately
not installed, they pin other torch builds. The app's Build button runs this as a job
(`llama_cpp_job`). Pure standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.rundir.jobs import kill_group

PACKAGE = "llama-cpp-python"
VENDOR = "vendor/llama.cpp/"
# What the binaries never need; left out of the unpacked tree (about 110 MB of test vocabularies,
# documentation and media).
SKIP = ("models/", "docs/", "media/", "tests/", "benches/", ".github/", ".devops/", ".git")
SOURCE_MARKER = ".dragonfarm-source"
TARGETS = (llama_cpp.SERVER, llama_cpp.QUANTIZE, llama_cpp.CLI)
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # self-contained binaries: the folder can move
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the server's web UI would be downloaded at build time
    "-DLLAMA_OPENSSL=OFF",  # local files and 127.0.0.1 only
    "-DGGML_BACKEND_DL=OFF",
)
PREFIX = "[build_llama_cpp]"


class LlamaCppBuildError(RuntimeError):
    """llama.cpp could not be built; the message says why and what to do."""


def say(message: str) -> None:
    print(f"{PREFIX} {message}", flush=True)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_step(argv: list[str]) -> None:
    """Run pip or cmake in a process group of its own, CalledProcessError when it fails. When
    the build is interrupted (a cancel, Ctrl+C) the whole group goes: a compiler left running
    would race the next build in the same folder."""
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        code = proc.wait()
    except BaseException:
        kill_group(proc.pid, grace=2.0)
        raise
    if code != 0:
        raise subprocess.CalledProcessError(code, argv)


def download(into: Path) -> Path:
    """The pinned sdist, fetched by pip (source only, no dependencies) into `into`."""
    into.mkdir(parents=True, exist_ok=True)
    spec = f"{PACKAGE}=={llama_cpp.LLAMA_CPP_PYTHON_VERSION}"
    say(f"downloading the {spec} source distribution with pip")
    run_step([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
              "--disable-pip-version-check", "-q", "-d", str(into), spec])  # fmt: skip
    found = sorted(into.glob(f"llama_cpp_python-{llama_cpp.LLAMA_CPP_PYTHON_VERSION}.tar.gz"))
    if not found:
        raise LlamaCppBuildError(f"pip downloaded no {spec} source distribution into {into}.")
    return found[0]


def unpack(sdist: Path, dest: Path) -> None:
    """vendor/llama.cpp of the sdist into `dest` (written beside it, then renamed)."""
    got = sha256(sdist)
    if got != llama_cpp.LLAMA_CPP_PYTHON_SHA256:
        raise LlamaCppBuildError(
            f"{sdist} has sha256 {got}, not the pinned {llama_cpp.LLAMA_CPP_PYTHON_SHA256} of "
            f"{PACKAGE} {llama_cpp.LLAMA_CPP_PYTHON_VERSION}; refusing to build from it."
        )
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{dest.name}-", dir=dest.parent))
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = []
            for member in tar.getmembers():
                top, _, rest = member.name.partition("/")
                if not rest.startswith(VENDOR):
                    continue
                inner = rest[len(VENDOR) :]
                if not inner or inner.startswith(SKIP):
                    continue
                member.name = inner
                members.append(member)
            tar.extractall(tmp, members=members, filter="data")
        if not (tmp / llama_cpp.CONVERTER).is_file():
            raise LlamaCppBuildError(f"{sdist} holds no {VENDOR}{llama_cpp.CONVERTER}.")
        (tmp / SOURCE_MARKER).write_text(sdist.name + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compile_binaries(src: Path, native: bool, jobs: int) -> list[str]:
    """Configure and build the binaries in src/build; returns the cmake flags used."""
    if shutil.which("cmake") is None:
        raise LlamaCppBuildError(
            "cmake is not installed; install it (Debian/Ubuntu: apt-get install cmake g++), "
            "then build again."
        )
    flags = [*CMAKE_FLAGS, f"-DGGML_NATIVE={'ON' if native else 'OFF'}"]
    if native and platform.machine() in ("x86_64", "AMD64"):
        flags += [f"-DCMAKE_C_FLAGS={llama_cpp.NATIVE_CFLAGS}",
                  f"-DCMAKE_CXX_FLAGS={llama_cpp.NATIVE_CFLAGS}"]  # fmt: skip
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    cache = src / "build" / "CMakeCache.txt"
    wanted = "GGML_NATIVE:BOOL=" + ("ON" if native else "OFF")
    if cache.is_file() and wanted not in cache.read_text(errors="replace"):
        shutil.rmtree(src / "build")  # built the other way: start over
    if (src / "build").is_dir() and not cache.is_file():
        shutil.rmtree(src / "build")
    say("configuring: cmake " + " ".join(flags))
    run_step(["cmake", "-S", str(src), "-B", str(src / "build"), *generator, *flags,
              "-Wno-dev", "--log-level=WARNING"])  # fmt: skip
    say(f"building {', '.join(TARGETS)} with {jobs} jobs")
    run_step(["cmake", "--build", str(src / "build"), "--target", *TARGETS, "-j", str(jobs)])
    return flags


def smoke(src: Path) -> None:
    """Each binary starts (a build that links but cannot run is not complete)."""
    for name in TARGETS:
        binary = src / "build" / "bin" / name
        args = ["--version"] if name != llama_cpp.QUANTIZE else ["--help"]
        done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)
        # llama-quantize --help prints its usage and exits 1: only a crash is a failure.
        if done.returncode < 0 or done.returncode > 1:
            raise LlamaCppBuildError(f"{binary} {' '.join(args)} failed:\n{done.stderr[-2000:]}")


@contextlib.contextmanager
def build_lock(dest: Path) -> Iterator[None]:
    """Hold <dest>.lock for the build: a second build of the same folder (the command line
    and the app's button at once) is refused while the first runs, never interleaved."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f"{dest.name}.lock", "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise LlamaCppBuildError(
                f"llama.cpp is being built into {dest} already (by {holder}); wait for that "
                "build to end (about 10 minutes), then it is found by itself."
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        yield


def _write_marker(dest: Path, flags: list[str], native: bool, seconds: float) -> None:
    marker = {
        "llama_cpp_python": llama_cpp.LLAMA_CPP_PYTHON_VERSION,
        "build_revision": llama_cpp.BUILD_REVISION,
        "sha256": llama_cpp.LLAMA_CPP_PYTHON_SHA256,
        "binaries": list(TARGETS),
        "cmake_flags": flags,
        "native": native,
        "machine": platform.machine(),
        "cpu_flags": sorted(llama_cpp.cpu_flags()) if native else [],
        "build_seconds": seconds,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp_marker = dest / (llama_cpp.BUILT_MARKER + ".tmp")
    tmp_marker.write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp_marker, dest / llama_cpp.BUILT_MARKER)  # last: the build is complete


def build_llama_cpp(
    cache: str | os.PathLike[str] | None = None,
    *,
    sdist: str | os.PathLike[str] | None = None,
    portable: bool = False,
    jobs: int = 2,
    force: bool = False,
) -> Path:
    """Build llama.cpp into `cache` (default `llama_cpp.cache_dir()`), or reuse a complete build
    for this CPU; returns the folder. sdist: a copy of the pinned source distribution (else pip
    fetches it). portable: no -march=native. jobs: parallel compile jobs. force: build again
    even when complete. Raises LlamaCppBuildError (or CalledProcessError from pip or cmake,
    whose output is above it)."""
    dest = Path(cache or llama_cpp.cache_dir()).expanduser().resolve()
    native = not portable
    problem = llama_cpp.cache_problem(dest)
    if not force and problem is None:
        marker = llama_cpp.read_marker(dest) or {}
        say(f"llama.cpp is ready in {dest} (built {marker.get('built_at')}); reused")
        return dest
    with build_lock(dest):
        started = time.monotonic()
        if force and dest.exists():
            shutil.rmtree(dest)
        elif llama_cpp.read_marker(dest) is not None:  # complete, but for another CPU
            say(f"{problem}; building again")
            shutil.rmtree(dest / "build", ignore_errors=True)
        (dest / llama_cpp.BUILT_MARKER).unlink(missing_ok=True)
        if not (dest / SOURCE_MARKER).is_file():
            if sdist:
                unpack(Path(sdist).expanduser().resolve(), dest)
            else:
                with tempfile.TemporaryDirectory(prefix="dragonfarm-sdist-") as tmp:
                    unpack(download(Path(tmp)), dest)
            say(f"llama.cpp source unpacked into {dest} ({time.monotonic() - started:.0f} s)")
        else:
            say(f"reusing the unpacked source in {dest}; resuming the build")
        flags = compile_binaries(dest, native, max(1, jobs))
        smoke(dest)
        seconds = round(time.monotonic() - started, 1)
        _write_marker(dest, flags, native, seconds)
    say(f"llama.cpp is ready in {dest} ({seconds:.0f} s)")
    return dest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build's flags, for `dragonfarm build-llama-cpp` and scripts/build_llama_cpp.py."""
    parser.add_argument("--cache", type=Path, default=None,
                        help=f"the folder to build in (default: {llama_cpp.cache_dir()})")  # fmt: skip
    parser.add_argument("--sdist", type=Path, help="a copy of the source distribution to use")
    parser.add_argument("--portable", action="store_true",
                        help="compile without -march=native (runs on other CPUs, slower)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2,
                        help="parallel compile jobs (default: %(default)s)")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="rebuild even when complete")


def run(args: argparse.Namespace) -> int:
    """The command: 0 when llama.cpp is ready, 1 (the reason on stderr) when it is not."""
    try:
        build_llama_cpp(args.cache, sdist=args.sdist, portable=args.portable, jobs=args.jobs,
                        force=args.force)  # fmt: skip
    except LlamaCppBuildError as e:
        print(f"{PREFIX} {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"{PREFIX} failed: {' '.join(map(str, e.cmd))} exited {e.returncode}; see the "
              "output above.", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def main(argv: list[str] | None = None, prog: str = "dragonfarm build-llama-cpp") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
