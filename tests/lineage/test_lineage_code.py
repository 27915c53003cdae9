"""The code panel's Python (codegen/lineage.py) runs and gives the lineage the tab drew."""

from __future__ import annotations

import contextlib
import io

import dragonfarm_core as dragon
from dragonfarm_core.codegen.lineage import lineage_code


def test_the_code_reproduces_the_lineage(chain):
    code = lineage_code(chain.dpo.id, chain.runs)
    assert f'dragon.lineage("{chain.dpo.id}", runs_dir="{chain.runs}")' in code
    scope: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(code, "<lineage code>", "exec"), scope)
    assert scope["lin"].to_dict() == dragon.lineage(chain.dpo).to_dict()
    assert out.getvalue().startswith(f"Lineage of run {chain.dpo.id}")
