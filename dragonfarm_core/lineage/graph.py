"""The lineage graph: nodes (a run, a file, a pipeline, an export), edges (what links them), and
the cut that `lineage(x)` returns, laid out by generation.

    g = Graph()
    g.add(Node("run:/runs/a", "run", "a", "/runs/a", "2026-12-07T10:00:00+00:00", PRESENT))
    g.link("dataset:/data/t.jsonl", "run:/runs/a", "trained on")
    g.cut("run:/runs/a")            # -> Lineage: what it came from and what came from it

A node's key is its kind and its path (or, for a thing with no path, its name), so the same file
named by two runs is one node. Pure standard library: the app draws what this returns.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Where a node's files are: still there, moved under <runs_dir>/archived/, gone (a config or a
# record names it but it is no longer on disk), or never on this machine (a Hub id, a repo).
PRESENT, ARCHIVED, DELETED, REMOTE = "present", "archived", "deleted", "remote"
STATES = (PRESENT, ARCHIVED, DELETED, REMOTE)
KINDS = ("dataset", "synthesized", "feedback", "feedback_export", "pipeline", "run", "merged",
         "gguf", "published", "ollama")  # fmt: skip


@dataclass(frozen=True)
class Node:
    """One thing in the lineage."""

    key: str  # unique in the graph: "<kind>:<path or name>"; edges name nodes by it
    kind: str  # one of KINDS
    id: str  # what a person calls it: a run id, a file name, a repo
    path: str | None  # its folder or file (a URL for a published repo); None when unknown
    time: str | None  # ISO-8601 UTC: created (a run, a pipeline) or last written (a file)
    state: str  # one of STATES
    detail: str = ""  # one short line: "sft, succeeded", "12 rows", "3 events: 2 up, 1 edit"


@dataclass(frozen=True)
class Edge:
    """`source` went into `target`; `link` says how ("trained on", "continued from", ...)."""

    source: str
    target: str
    link: str


@dataclass(frozen=True)
class Lineage:
    """What `focus` came from and what came from it: `nodes` and `edges`, each node once.

    `generation(key)` is the node's column when drawn left to right: 0 for a node nothing in
    the graph came before, else one more than its latest parent's."""

    focus: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    _generations: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def node(self, key: str) -> Node:
        for n in self.nodes:
            if n.key == key:
                return n
        raise KeyError(f"No node {key!r} in this lineage; .nodes lists them.")

    @property
    def focus_node(self) -> Node:
        return self.node(self.focus)

    def parents(self, key: str) -> list[Node]:
        return [self.node(e.source) for e in self.edges if e.target == key]

    def children(self, key: str) -> list[Node]:
        return [self.node(e.target) for e in self.edges if e.source == key]

    def generation(self, key: str) -> int:
        if not self._generations:
            self._generations.update(_generations(self.nodes, self.edges))
        return self._generations[key]

    def ordered(self) -> list[Node]:
        """The nodes left to right (generation), then by time (unknown last), then by id."""
        return sorted(self.nodes, key=lambda n: (self.generation(n.key), n.time or "~", n.id))

    def to_dict(self) -> dict[str, Any]:
        return {
            "focus": self.focus,
            "nodes": [{**asdict(n), "generation": self.generation(n.key)} for n in self.ordered()],
            "edges": [asdict(e) for e in self.edges],
        }

    def __repr__(self) -> str:
        focus = self.focus_node
        lines = [f"Lineage of {focus.kind} {focus.id}: {len(self.nodes)} nodes, "
                 f"{len(self.edges)} links"]  # fmt: skip
        for n in self.ordered():
            mark = "  <- focus" if n.key == self.focus else ""
            state = "" if n.state == PRESENT else f" [{n.state}]"
            detail = f" ({n.detail})" if n.detail else ""
            lines.append(f"  {self.generation(n.key)}. {n.kind} {n.id}{detail}{state}{mark}")
            for e in self.edges:
                if e.target == n.key:
                    lines.append(f"       {e.link}: {self.node(e.source).id}")
        return "\n".join(lines)


def _generations(nodes: tuple[Node, ...], edges: tuple[Edge, ...]) -> dict[str, int]:
    """Longest path from a root, by relaxing the edges (a cycle, which no file should make,
    stops after as many rounds as there are nodes instead of looping)."""
    depth = {n.key: 0 for n in nodes}
    for _ in range(len(nodes)):
        changed = False
        for e in edges:
            if depth[e.target] < depth[e.source] + 1 <= len(nodes):
                depth[e.target] = depth[e.source] + 1
                changed = True
        if not changed:
            break
    return depth


class Graph:
    """Every node and link found in a runs folder, before the cut around one node."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.edges: dict[tuple[str, str], Edge] = {}

    def add(self, node: Node) -> str:
        """Add `node` unless one with its key is there (the first reading wins: a run read from
        its own folder before a config naming it as a parent); returns its key."""
        self.nodes.setdefault(node.key, node)
        return node.key

    def link(self, source: str, target: str, link: str) -> None:
        if source != target:
            self.edges.setdefault((source, target), Edge(source, target, link))

    def _reach(self, start: str, forward: bool) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            key = todo.pop()
            for s, t in self.edges:
                a, b = (s, t) if forward else (t, s)
                if a == key and b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    def cut(self, focus: str) -> Lineage:
        """Lineage of `focus`: its ancestors, its descendants, and what else went straight into
        a descendant (the pairs a child run trained on besides this run), with the links
        between them."""
        down = self._reach(focus, forward=True)
        keep = self._reach(focus, forward=False) | down
        keep |= {s for s, t in self.edges if t in down and t != focus}
        nodes = tuple(self.nodes[k] for k in self.nodes if k in keep)
        edges = tuple(e for (s, t), e in self.edges.items() if s in keep and t in keep)
        return Lineage(focus, nodes, edges)
