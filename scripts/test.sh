#!/usr/bin/env bash
# Install what the tests need, type-check, then run the whole test suite:
#   bash scripts/test.sh            (extra arguments go to pytest, e.g. -m "not slow")
# mypy checks what pyproject.toml's [tool.mypy] names (dragonfarm_core, ui, app.py); a type
# error fails the run before any test starts.
# Chromium for the browser tests comes from Debian's `chromium` package.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium >/dev/null
fi
python -m pip install -q -r requirements-dev.txt
python -m pip install -q --no-deps -e .

if ! python -m mypy; then
  echo "mypy found type errors (listed above): fix them, or run 'python -m mypy' to see them again." >&2
  exit 1
fi

set +e
python -m pytest "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here." >&2
  exit 1
fi
exit "$code"
