#!/usr/bin/env bash
# Install what the tests need, type-check, check the import contracts, then run every test tier:
#   bash scripts/test.sh            (extra arguments go to pytest, e.g. -m "not slow")
# Plain pytest is the fast tier only (pyproject.toml leaves out the tests marked slow,
# browser and gguf); this script runs them all (-m "") and prints the 25 slowest tests.
# mypy checks what pyproject.toml's [tool.mypy] names (dragonfarm_core, ui, app.py), and
# lint-imports the contracts of [tool.importlinter] (imports go one way); either failing stops
# the run before any test starts.
# Chromium for the browser tests comes from Debian's `chromium` package; cmake and g++ (for
# llama.cpp) and tcmalloc (libtcmalloc-minimal4) from Debian's too.
# llama.cpp for the GGUF tests is built by scripts/build_llama_cpp.py into ~/.cache/dragonfarm
# (about 10 minutes on 2 cores the first time, seconds once cached). A failed build does not
# stop the suite: the GGUF tests then fail (they never skip), saying why.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! command -v chromium >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium >/dev/null
fi
# tcmalloc: trainer processes preload it where the system has it (rundir/allocator.py);
# the tests check that they do.
if ! ldconfig -p 2>/dev/null | grep -q libtcmalloc_minimal; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq libtcmalloc-minimal4 >/dev/null
fi
if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq cmake g++ >/dev/null
fi
python -m pip install -q -r requirements-dev.txt
python -m pip install -q --no-deps -e .
if ! python scripts/build_llama_cpp.py; then
  echo "Building llama.cpp failed (above): the GGUF tests will fail." >&2
fi

if ! python -m mypy; then
  echo "mypy found type errors (listed above): fix them, or run 'python -m mypy' to see them again." >&2
  exit 1
fi

if ! lint-imports; then
  echo "An import breaks the layers of pyproject.toml's [tool.importlinter] (listed above): import from a lower layer, or move the shared piece down (docs/ARCHITECTURE.md)." >&2
  exit 1
fi

set +e
python -m pytest -m "" --durations=25 "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here." >&2
  exit 1
fi
exit "$code"
