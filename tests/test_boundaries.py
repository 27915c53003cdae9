"""The app process never imports torch, transformers, peft or trl; the import contract holds.

Two checks that complement each other. At run time, in a fresh interpreter (other tests in
this process may import torch): import the app, build it, touch every public API name, and look
at sys.modules. Statically (tests/import_contract.py): every import statement of every file,
function-level ones included, against the contract's three rules (ui imports only the public
API and the listed app-facing modules; the core never imports gradio or ui; only the trainers
and the inference worker import the heavy libraries). Synthetic trees show each rule fails.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from import_contract import HEAVY, ROOT, Tree, unused_exceptions, violations

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


@pytest.mark.slow
def test_app_and_public_api_never_import_heavy_libraries():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("HEAVY:")][-1]
    assert line == "HEAVY:", f"the app imported {line[6:]}"


@pytest.mark.slow
def test_the_import_contract_holds():
    found = violations(Tree.read())
    assert not found, "\n".join(found)


def test_every_exception_to_the_contract_is_still_needed():
    unused = unused_exceptions(Tree.read())
    assert not unused, "remove from tests/import_contract.py:\n" + "\n".join(unused)


# -- the contract on synthetic trees: a forbidden import anywhere is found ----------------------

BASE = {
    "app.py": "import dragonfarm_core as dragon\nfrom ui import layout\n",
    "ui/__init__.py": "",
    "ui/layout.py": "import gradio as gr\nfrom dragonfarm_core.rundir import files\n",
    "dragonfarm_core/__init__.py": (
        "from typing import TYPE_CHECKING\n"
        "from dragonfarm_core.models import resolve_model\n"
        "if TYPE_CHECKING:\n    import gradio as gr\n"
        "def app():\n    from ui.layout import build_app\n    return build_app()\n"
    ),
    "dragonfarm_core/models.py": "import json\n",
    "dragonfarm_core/rundir/__init__.py": "",
    "dragonfarm_core/rundir/files.py": "import os\n",
    "dragonfarm_core/trainers/__init__.py": "",
    "dragonfarm_core/rundir/train_config.py": "from dragonfarm_core.rundir import files\n",
    "dragonfarm_core/trainers/sft.py": "def main():\n    import torch\n    import peft\n",
    "dragonfarm_core/inference/__init__.py": "",
    "dragonfarm_core/inference/worker.py": "def load():\n    import transformers\n",
}


def synthetic(tmp_path: Path, **changed: str) -> list[str]:
    """The contract's violations in a small tree like the repository, with `changed` files
    (path with "/" as "__" and ".py" left out) added or replaced."""
    files = dict(BASE)
    files.update({k.replace("__", "/") + ".py": textwrap.dedent(v) for k, v in changed.items()})
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return violations(Tree.read(tmp_path))


def test_a_tree_that_keeps_the_contract_passes(tmp_path: Path):
    assert synthetic(tmp_path) == []


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        # rule 1: ui and app.py reach only the public API and the app-facing modules
        ({"ui__tab": "from dragonfarm_core.models import resolve_model\n"},
         "ui/tab.py:1 imports dragonfarm_core.models"),
        ({"ui__tab": "def f():\n    from ..dragonfarm_core import x\n    import dragonfarm_core.models\n"},
         "ui/tab.py:3 imports dragonfarm_core.models"),
        ({"app": "from dragonfarm_core import models\n"}, "app.py:1 imports dragonfarm_core.models"),
        ({"ui__tab": "import importlib\nm = importlib.import_module('dragonfarm_core.models')\n"},
         "ui/tab.py:2 imports dragonfarm_core.models"),
        # rule 2: the core never imports gradio or ui (only app() and its return type may)
        ({"dragonfarm_core__models": "import gradio\n"}, "dragonfarm_core/models.py:1 imports gradio"),
        ({"dragonfarm_core__models": "class A:\n    def f(self):\n        from ui import layout\n"},
         "dragonfarm_core/models.py:3 imports ui.layout (in A.f)"),
        ({"dragonfarm_core__rundir__files": "from ui.layout import x\n"},
         "dragonfarm_core/rundir/files.py:1 imports ui.layout"),
        # rule 3: torch & co. only in the trainers and the worker, at any depth and through any
        # internal module (here config.py, inside the trainers, but imported by the API)
        ({"dragonfarm_core__models": "def f():\n    try:\n        import torch\n    except ImportError:\n        pass\n"},
         "dragonfarm_core/models.py imports torch"),
        ({"ui__tab": "from transformers import AutoTokenizer\n"}, "ui/tab.py imports transformers"),
        ({"dragonfarm_core__rundir__train_config": "import trl\n",
          "dragonfarm_core__models": "from dragonfarm_core.rundir.train_config import TrainConfig\n"},
         "dragonfarm_core/models.py imports trl (dragonfarm_core.models -> "
         "dragonfarm_core.rundir.train_config -> trl)"),
        ({"dragonfarm_core__models": "from .trainers import sft\n"},
         "dragonfarm_core/models.py imports torch (dragonfarm_core.models -> "
         "dragonfarm_core.trainers.sft -> torch)"),
        # a dynamic import the contract cannot read is refused
        ({"dragonfarm_core__models": "import importlib\nname = 'to' + 'rch'\nimportlib.import_module(name)\n"},
         "dragonfarm_core/models.py:3: a dynamic import by a computed name"),
    ],
)  # fmt: skip
def test_a_forbidden_import_breaks_the_contract(tmp_path: Path, changed, expected):
    found = synthetic(tmp_path, **changed)
    assert any(v.startswith(expected) for v in found), found
