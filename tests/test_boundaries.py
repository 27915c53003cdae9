"""The app process never imports torch, transformers, peft or trl.

Checked in a fresh interpreter, because other tests in this process may import them: import the
app, build it, touch every public API name, and look at sys.modules.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "peft", "trl", "bitsandbytes", "accelerate")

PROBE = f"""
import sys, tempfile
import app
import dragonfarm_core as dragon
from ui.layout import build_app
for name in dragon.__all__:
    getattr(dragon, name)
build_app(tempfile.mkdtemp())
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print("HEAVY:" + ",".join(heavy))
"""


def test_app_and_public_api_never_import_heavy_libraries():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("HEAVY:")][-1]
    assert line == "HEAVY:", f"the app imported {line[6:]}"
