"""The Python of a lineage, as the Runs tab shows it:

lineage_code("20261207-101500-tiny-support", "/home/me/dragonfarm_runs")
"""

from __future__ import annotations

import os

from dragonfarm_core.data.codegen import literal, runs_dir_argument


def lineage_code(x: str | os.PathLike[str], runs_dir: str | os.PathLike[str]) -> str:
    """`dragon.lineage(x)` (with the runs dir unless it is the configured one), printed, and
    each node's kind, id and state."""
    arguments = ", ".join(a for a in (literal(str(x)), runs_dir_argument(runs_dir)) if a)
    return "\n".join([
        "import dragonfarm_core as dragon",
        "",
        f"lin = dragon.lineage({arguments})",
        "print(lin)  # each node with what it came from; lin.to_dict() for JSON",
        "for node in lin.nodes:",
        "    print(node.kind, node.id, node.state, node.path)",
        "",
    ])  # fmt: skip
