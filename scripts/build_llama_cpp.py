"""Build llama.cpp's converter and CPU binaries offline, into dragonfarm's cache folder.

    python scripts/build_llama_cpp.py                  # download (pip), unpack, build; or reuse
    python scripts/build_llama_cpp.py --sdist FILE     # from a copy of the source distribution
    python scripts/build_llama_cpp.py --portable       # no -march=native (a cache to carry)

llama.cpp's source travels inside the llama-cpp-python source distribution (vendor/llama.cpp).
This script fetches that sdist at the pinned version with pip (the machine's own package index
configuration, no other download), checks its sha256, unpacks vendor/llama.cpp into
`llama_cpp.cache_dir()` (~/.cache/dragonfarm/llama.cpp-<version>, outside the repository) and
builds llama-server, llama-quantize and llama-cli with cmake: CPU only, static, no OpenSSL, no
web UI download, no tests or examples. The marker written last (`.dragonfarm-built.json`) says
the build is complete; a complete cache for this CPU is reused at once, an interrupted one is
resumed (cmake rebuilds only what is missing). dragonfarm finds the result without being told
(`dragonfarm check` shows where). The converter needs no install: it runs with dragonfarm's own
Python (torch, transformers, numpy, sentencepiece) and the tree's gguf-py; llama.cpp's
requirements files are deliberately not installed, they pin other torch builds.

Exit status 0 when llama.cpp is ready, 1 (with the reason on stderr) when it could not be built.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dragonfarm_core import llama_cpp  # noqa: E402

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


def say(message: str) -> None:
    print(f"[build_llama_cpp] {message}", flush=True)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(into: Path) -> Path:
    """The pinned sdist, fetched by pip (source only, no dependencies) into `into`."""
    into.mkdir(parents=True, exist_ok=True)
    spec = f"{PACKAGE}=={llama_cpp.LLAMA_CPP_PYTHON_VERSION}"
    say(f"downloading the {spec} source distribution with pip")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
         "--disable-pip-version-check", "-q", "-d", str(into), spec],
        check=True,
    )  # fmt: skip
    found = sorted(into.glob(f"llama_cpp_python-{llama_cpp.LLAMA_CPP_PYTHON_VERSION}.tar.gz"))
    if not found:
        raise SystemExit(f"pip downloaded no {spec} source distribution into {into}.")
    return found[0]


def unpack(sdist: Path, dest: Path) -> None:
    """vendor/llama.cpp of the sdist into `dest` (written beside it, then renamed)."""
    got = sha256(sdist)
    if got != llama_cpp.LLAMA_CPP_PYTHON_SHA256:
        raise SystemExit(
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
            raise SystemExit(f"{sdist} holds no {VENDOR}{llama_cpp.CONVERTER}.")
        (tmp / SOURCE_MARKER).write_text(sdist.name + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build(src: Path, native: bool, jobs: int) -> list[str]:
    """Configure and build the binaries in src/build; returns the cmake flags used."""
    if shutil.which("cmake") is None:
        raise SystemExit(
            "cmake is not installed; install it (Debian/Ubuntu: apt-get install cmake g++), "
            "then run this script again."
        )
    flags = [*CMAKE_FLAGS, f"-DGGML_NATIVE={'ON' if native else 'OFF'}"]
    if native and platform.machine() in ("x86_64", "AMD64"):
        flags += [f"-DCMAKE_C_FLAGS={llama_cpp.NATIVE_CFLAGS}",
                  f"-DCMAKE_CXX_FLAGS={llama_cpp.NATIVE_CFLAGS}"]  # fmt: skip
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    cache = src / "build" / "CMakeCache.txt"
    if cache.is_file() and "GGML_NATIVE:BOOL=" + ("ON" if native else "OFF") not in cache.read_text(
        errors="replace"
    ):
        shutil.rmtree(src / "build")  # built the other way: start over
    if (src / "build").is_dir() and not cache.is_file():
        shutil.rmtree(src / "build")
    say("configuring: cmake " + " ".join(flags))
    subprocess.run(["cmake", "-S", str(src), "-B", str(src / "build"), *generator, *flags,
                    "-Wno-dev", "--log-level=WARNING"], check=True)  # fmt: skip
    say(f"building {', '.join(TARGETS)} with {jobs} jobs")
    subprocess.run(["cmake", "--build", str(src / "build"), "--target", *TARGETS,
                    "-j", str(jobs)], check=True)  # fmt: skip
    return flags


def smoke(src: Path) -> None:
    """Each binary starts (a build that links but cannot run is not complete)."""
    for name in TARGETS:
        binary = src / "build" / "bin" / name
        args = ["--version"] if name != llama_cpp.QUANTIZE else ["--help"]
        done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)
        # llama-quantize --help prints its usage and exits 1: only a crash is a failure.
        if done.returncode < 0 or done.returncode > 1:
            raise SystemExit(f"{binary} {' '.join(args)} failed:\n{done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None,
                        help=f"the folder to build in (default: {llama_cpp.cache_dir()})")  # fmt: skip
    parser.add_argument("--sdist", type=Path, help="a copy of the source distribution to use")
    parser.add_argument("--portable", action="store_true",
                        help="compile without -march=native (runs on other CPUs, slower)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    parser.add_argument("--force", action="store_true", help="rebuild even when complete")
    ns = parser.parse_args(argv)
    dest = (ns.cache or llama_cpp.cache_dir()).expanduser().resolve()
    native = not ns.portable
    problem = llama_cpp.cache_problem(dest)
    if not ns.force and problem is None:
        marker = llama_cpp.read_marker(dest) or {}
        say(f"llama.cpp is ready in {dest} (built {marker.get('built_at')}); reused")
        return 0
    started = time.monotonic()
    if ns.force and dest.exists():
        shutil.rmtree(dest)
    elif llama_cpp.read_marker(dest) is not None:  # complete, but for another CPU: recompile
        say(f"{problem}; building again")
        shutil.rmtree(dest / "build", ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    (dest / llama_cpp.BUILT_MARKER).unlink(missing_ok=True)
    if not (dest / SOURCE_MARKER).is_file():
        if ns.sdist:
            sdist = ns.sdist.expanduser().resolve()
            unpack(sdist, dest)
        else:
            with tempfile.TemporaryDirectory(prefix="dragonfarm-sdist-") as tmp:
                unpack(download(Path(tmp)), dest)
        say(f"llama.cpp source unpacked into {dest} ({time.monotonic() - started:.0f} s)")
    else:
        say(f"reusing the unpacked source in {dest}; resuming the build")
    flags = build(dest, native, max(1, ns.jobs))
    smoke(dest)
    seconds = round(time.monotonic() - started, 1)
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
    say(f"llama.cpp is ready in {dest} ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as e:
        print(f"[build_llama_cpp] failed: {' '.join(map(str, e.cmd))} exited {e.returncode}; "
              "see the output above.", file=sys.stderr)  # fmt: skip
        sys.exit(1)
