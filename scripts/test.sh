#!/usr/bin/env bash
# Install what the tests need, then run the whole test suite:
#   bash scripts/test.sh            (extra arguments go to pytest, e.g. -m "not slow")
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

set +e
python -m pytest "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here." >&2
  exit 1
fi
exit "$code"
