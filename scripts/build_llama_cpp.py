"""Build llama.cpp's converter and CPU binaries offline, into dragonfarm's cache folder.

    python scripts/build_llama_cpp.py                  # download (pip), unpack, build; or reuse
    python scripts/build_llama_cpp.py --sdist FILE     # from a copy of the source distribution
    python scripts/build_llama_cpp.py --portable       # no -march=native (a cache to carry)

The same as `dragonfarm build-llama-cpp` (the build lives in the package,
`dragonfarm_core.llamacpp.build`, so a pip install has it too); kept for scripts/test.sh, CI
and the Dockerfile, which run it from a checkout. The cache is ~/.cache/dragonfarm (see
`llama_cpp.cache_dir()`). Exit status 0 when llama.cpp is ready, 1 (with the reason on stderr)
when it could not be built.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dragonfarm_core.llamacpp import build as llama_cpp_build  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return llama_cpp_build.main(argv, prog="python scripts/build_llama_cpp.py")


if __name__ == "__main__":
    sys.exit(main())
