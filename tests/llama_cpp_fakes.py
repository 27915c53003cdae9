"""A llama.cpp tree that is no llama.cpp, for the tests that find, build or use one without
compiling anything: a converter script, gguf-py, and executable binaries that do nothing;
`complete_cache` adds the marker a finished build writes last, for this CPU."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from dragonfarm_core.llamacpp import location as llama_cpp


def fake_llama_cpp(root: Path, converter: str = "") -> Path:
    """A llama.cpp tree: a converter script (`converter` is its body), gguf-py, and
    executable binaries that do nothing."""
    (root / "gguf-py" / "gguf").mkdir(parents=True)
    (root / "gguf-py" / "gguf" / "__init__.py").write_text("")
    (root / llama_cpp.CONVERTER).write_text(converter or "import sys\nsys.exit(0)\n")
    (root / "build" / "bin").mkdir(parents=True)
    for name in (llama_cpp.SERVER, llama_cpp.QUANTIZE):
        binary = root / "build" / "bin" / name
        binary.write_text("#!/bin/sh\nexit 0\n")
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return root


def complete_cache(root: Path) -> Path:
    """`fake_llama_cpp(root)` with the marker of a finished native build for this CPU."""
    fake_llama_cpp(root)
    marker = {"native": True, "cpu_flags": sorted(llama_cpp.cpu_flags()), "built_at": "then",
              "build_revision": llama_cpp.BUILD_REVISION}  # fmt: skip
    (root / llama_cpp.BUILT_MARKER).write_text(json.dumps(marker))
    return root
