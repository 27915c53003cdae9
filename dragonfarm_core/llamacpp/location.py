"""Where llama.cpp is on this machine: its converter, its Python package and its binaries.

    tools = find_llama_cpp()            # argument, else LLAMA_CPP_DIR, else the build cache
    tools.converter, tools.gguf_py, tools.server, tools.quantize

dragonfarm never writes GGUF itself: `gguf.export_gguf` runs llama.cpp's own
`convert_hf_to_gguf.py` (and `llama-quantize`), and the template round-trip check runs
`llama-server`. Those come from a llama.cpp source tree with its CPU binaries built: one the user
points at (`LLAMA_CPP_DIR`, a checkout built with cmake), or the one `dragonfarm build-llama-cpp`
(`llama_cpp_build`; the Export tab's Build button) builds offline from the llama.cpp sources that
travel inside the pinned llama-cpp-python source distribution, into a cache folder outside the
repository (`cache_dir()`). The cache is complete once its marker, written last, is there; a native build
records the CPU features it was compiled for, so a cache carried to a machine without them is
reported unusable instead of crashing on an illegal instruction.

The converter runs with dragonfarm's own Python (numpy, torch, transformers, sentencepiece are
here already) and the tree's gguf-py on PYTHONPATH; llama.cpp's requirements files are never
installed (they pin other torch and transformers builds). Pure standard library: the app,
`dragonfarm check` and the build import it.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LLAMA_CPP_DIR_ENV = "LLAMA_CPP_DIR"
CACHE_ENV = "DRAGONFARM_CACHE"
# The llama-cpp-python source distribution whose vendor/llama.cpp the build script compiles,
# and its sha256 (the download is checked against it: the source is what was tested).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# Written last into a built cache folder: what was built, how, and for which CPU.
BUILT_MARKER = ".dragonfarm-built.json"
# Raised when llama_cpp_build changes how it builds, so a cache built the old way is
# built again. 2: native builds leave out ggml's AMX kernels (see NATIVE_CFLAGS).
BUILD_REVISION = 2
# ggml's AMX matrix kernels (compiled in whenever -march=native finds AMX, as on Sapphire Rapids)
# crashed llama-server (SIGSEGV in ggml_backend_amx_mul_mat) loading the bundled model as q8_0:
# native builds leave them out. An explicit -mno-<isa> wins over -march=native in any order.
NATIVE_CFLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CONVERTER = "convert_hf_to_gguf.py"
SERVER, QUANTIZE, CLI = "llama-server", "llama-quantize", "llama-cli"
# Where a llama.cpp tree keeps its binaries: cmake's default build folder first.
BIN_DIRS = ("build/bin", "bin", ".")
# The x86/ARM features a native ggml build compiles for (from /proc/cpuinfo's flags); a cache
# built with one of them runs only where it is present.
SIMD_FLAGS = frozenset(
    {"sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni",
     "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512vbmi",
     "amx_tile", "amx_int8", "amx_bf16", "neon", "asimd", "asimddp", "sve", "i8mm"}
)  # fmt: skip
BUILD_HINT = (
    "Build it here, once: press Build llama.cpp in the app's Export tab, or run `dragonfarm "
    f"build-llama-cpp` (about 10 minutes on 2 cores; it fetches the pinned llama-cpp-python "
    f"{LLAMA_CPP_PYTHON_VERSION} source distribution with pip and compiles llama.cpp's CPU "
    "binaries into {cache}, where they are found by themselves, no restart needed). Or point "
    f"{LLAMA_CPP_DIR_ENV} at a llama.cpp checkout whose binaries are built "
    "(cmake -B build && cmake --build build --target llama-server llama-quantize)."
)


class LlamaCppMissing(RuntimeError):
    """No usable llama.cpp was found; the message says where it looked and how to get one."""


@dataclass(frozen=True)
class LlamaCpp:
    """A usable llama.cpp: its source tree, the converter and gguf-py in it, its binaries
    (None when that one was not built), and how it was found (argument, LLAMA_CPP_DIR, cache)."""

    root: Path
    converter: Path
    gguf_py: Path
    server: Path | None
    quantize: Path | None
    cli: Path | None
    found_by: str

    def binary(self, name: str) -> Path:
        """The binary `name` (llama-server, llama-quantize), or LlamaCppMissing naming it."""
        path = {SERVER: self.server, QUANTIZE: self.quantize, CLI: self.cli}.get(name)
        if path is None:
            raise LlamaCppMissing(
                f"The llama.cpp in {self.root} (from {self.found_by}) has no {name} binary "
                f"(looked in {', '.join(BIN_DIRS)}). Build it there (cmake -B build && cmake "
                f"--build build --target {name}), or use another llama.cpp. "
                + BUILD_HINT.format(cache=cache_dir())
            )
        return path

    def converter_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """`environ` (default: this process's) with the tree's gguf-py first on PYTHONPATH: the
        converter must use the gguf package of its own llama.cpp, not another installed one."""
        env = dict(os.environ if environ is None else environ)
        rest = env.get("PYTHONPATH")
        env["PYTHONPATH"] = os.pathsep.join([str(self.gguf_py), *([rest] if rest else [])])
        return env


def cache_root(environ: dict[str, str] | None = None) -> Path:
    """dragonfarm's cache folder: DRAGONFARM_CACHE, else ($XDG_CACHE_HOME or ~/.cache)/dragonfarm
    (where the machine queue lives too)."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "dragonfarm"


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Where the build script puts llama.cpp: <cache root>/llama.cpp-<llama-cpp-python version>."""
    return cache_root(environ) / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def cpu_flags() -> frozenset[str]:
    """The SIMD features of this machine's CPU that a native build may use (empty when the
    platform does not say, e.g. macOS: then a cache is trusted as built)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split()) & SIMD_FLAGS
    return frozenset()


def read_marker(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The build marker of a cache folder, or None when the build is not complete."""
    try:
        value = json.loads((Path(root) / BUILT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def cache_problem(root: str | os.PathLike[str]) -> str | None:
    """Why the cache folder `root` is not a usable build (None when it is)."""
    marker = read_marker(root)
    if marker is None:
        return f"{root} holds no finished build (its {BUILT_MARKER} marker is missing)"
    if marker.get("build_revision", 1) != BUILD_REVISION:
        return (
            f"{root} was built by an earlier build script (revision "
            f"{marker.get('build_revision', 1)}, now {BUILD_REVISION})"
        )
    if marker.get("machine") not in (None, platform.machine()):
        return f"{root} was built for {marker['machine']}, this machine is {platform.machine()}"
    missing = set(marker.get("cpu_flags") or []) - cpu_flags() if marker.get("native") else set()
    if missing and cpu_flags():
        return (
            f"{root} was built natively for a CPU with {', '.join(sorted(missing))}, which this "
            "CPU lacks (its binaries would stop on an illegal instruction)"
        )
    return None


def _binary(root: Path, name: str) -> Path | None:
    for sub in BIN_DIRS:
        path = root / sub / name
        if path.is_file() and os.access(path, os.X_OK):
            return path.resolve()
    return None


def inspect(root: str | os.PathLike[str], found_by: str) -> LlamaCpp:
    """The llama.cpp tree at `root`, or LlamaCppMissing naming what it lacks."""
    path = Path(root).expanduser().resolve()
    hint = BUILD_HINT.format(cache=cache_dir())
    if not path.is_dir():
        raise LlamaCppMissing(f"{found_by} names {path}, which is not a folder. {hint}")
    converter, gguf_py = path / CONVERTER, path / "gguf-py"
    if not converter.is_file() or not (gguf_py / "gguf" / "__init__.py").is_file():
        raise LlamaCppMissing(
            f"{path} (from {found_by}) is not a llama.cpp source tree: it has no {CONVERTER} "
            f"and gguf-py/ at its top. {hint}"
        )
    return LlamaCpp(
        root=path,
        converter=converter,
        gguf_py=gguf_py,
        server=_binary(path, SERVER),
        quantize=_binary(path, QUANTIZE),
        cli=_binary(path, CLI),
        found_by=found_by,
    )


def find_llama_cpp(llama_cpp_dir: str | os.PathLike[str] | None = None) -> LlamaCpp:
    """The llama.cpp to use: `llama_cpp_dir`, else LLAMA_CPP_DIR, else the build cache.

    A folder named by the argument or the variable must be a llama.cpp tree (its binaries are
    looked for in build/bin, bin and the top); the cache must hold a finished build for this
    CPU. Raises LlamaCppMissing saying what was wrong and how to get a llama.cpp.
    """
    if llama_cpp_dir is not None and str(llama_cpp_dir):
        return inspect(llama_cpp_dir, "llama_cpp_dir")
    if os.environ.get(LLAMA_CPP_DIR_ENV):
        return inspect(os.environ[LLAMA_CPP_DIR_ENV], LLAMA_CPP_DIR_ENV)
    cache = cache_dir()
    problem = cache_problem(cache) if cache.is_dir() else f"{cache} does not exist"
    if problem:
        raise LlamaCppMissing(
            f"No llama.cpp found: no llama_cpp_dir was given, {LLAMA_CPP_DIR_ENV} is not set, "
            f"and the build cache is not usable ({problem}). " + BUILD_HINT.format(cache=cache)
        )
    return inspect(cache, "the build cache")


def describe() -> dict[str, Any]:
    """What `dragonfarm check` reports: whether llama.cpp is available, where, and if not, why
    (with the way to get one); never raises."""
    try:
        tools = find_llama_cpp()
    except LlamaCppMissing as e:
        return {"available": False, "problem": str(e)}
    marker = read_marker(tools.root) or {}
    return {
        "available": tools.server is not None and tools.quantize is not None,
        "root": str(tools.root),
        "found_by": tools.found_by,
        "server": str(tools.server) if tools.server else None,
        "quantize": str(tools.quantize) if tools.quantize else None,
        "version": marker.get("llama_cpp_python"),
        "problem": None
        if tools.server and tools.quantize
        else f"{tools.root} lacks llama-server or llama-quantize; build them there.",
    }
