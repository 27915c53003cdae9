"""The import contract, read statically from the source: which code may import which.

`tests/test_boundaries.py` runs it on the repository (and on synthetic trees, to show that it
fails). Every import of every .py file under dragonfarm_core/, ui/ and app.py counts, at any
depth: module level, inside functions and classes, under `if TYPE_CHECKING:` or `try:`, and
`importlib.import_module("name")` / `__import__("name")` with a literal name. A dynamic import
whose name is not a literal cannot be checked, so it is refused outside DYNAMIC_IMPORTS.

The rules:

1. ui/ and app.py import only the public API (`dragonfarm_core`), the run-file readers
   (`dragonfarm_core.rundir.files`) and the app-facing modules in APP_FACING, each with its
   reason. Anything else the app needs is made public in dragonfarm_core/__init__.py.
2. The core (dragonfarm_core) never imports gradio or ui, except CORE_IMPORTS_OF_THE_APP.
3. Nothing outside dragonfarm_core/trainers/ and dragonfarm_core/inference/worker.py imports
   a HEAVY library, directly or through an internal module that does (parent packages count:
   importing `a.b.c` runs `a` and `a.b`).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("dragonfarm_core", "ui", "app.py")
CORE = "dragonfarm_core"
HEAVY = ("torch", "transformers", "peft", "trl", "bitsandbytes", "accelerate")
APP_LIBRARIES = ("gradio", "ui")

# Rule 1: what ui/ and app.py may import from the core, besides the public API itself.
APP_FACING: dict[str, str] = {
    "dragonfarm_core": "the public API",
    "dragonfarm_core.rundir.files": "the run-file readers: the pages show runs from their files",
    "dragonfarm_core.data.codegen": (
        "code panels: literal, dataset_code, runs_dir_argument, portable (what dragon.code uses)"
    ),
    "dragonfarm_core.codegen.run": "code panels: the script dragon.code(run) writes, for the Train tab",
    "dragonfarm_core.codegen.sweep": "code panels: the base run's spec lines of the Train tab's "
    "sweep script",
    "dragonfarm_core.rundir.sweep_record": "the Compare tab's sweep plots: where its Optuna "
    "study (study.db) is, and its trials' runs",
    "dragonfarm_core.sweeps.space": "the Train tab's Sweep: the settings a sweep can vary, the "
    "samplers and the objectives a spec produces",
    "dragonfarm_core.codegen.agreement": "code panels: the judge_agreement script of the "
    "Evaluate tab's Check against my feedback",
    "dragonfarm_core.codegen.lineage": "code panels: the dragon.lineage script of the Runs tab's "
    "Lineage section",
    "dragonfarm_core.lineage.graph": "the Runs tab's lineage picture: the node and graph types "
    "it draws and the state a present node has",
    "dragonfarm_core.codegen.bundle": "code panels: the bundle/remote/import_results scripts of "
    "Run elsewhere and Import",
    "dragonfarm_core.export.summary": "the Export tab: the files a run's exports wrote, with "
    "their sizes and every check's verdict",
    "dragonfarm_core.auth.http_guard": "the server: host and origin checks (launch, --allowed-hosts)",
    "dragonfarm_core.auth.upload_caps": "the server: the upload size caps",
    "dragonfarm_core.auth.login_guard": "the server: the lab profile's login on every route",
    "dragonfarm_core.rundir.refs": "the server: confines each run a page names to the runs dir",
    "dragonfarm_core.rundir.queue": "the lab's queue panel (the machine's tickets) and the Train "
    "tab's device list (the GPUs found without torch)",
    "dragonfarm_core.rundir.jobs": "the lab's per-user cap: `admission`, asked before any device "
    "job this app process queues",
    "dragonfarm_core.chat_template": (
        "the Mapping preview: rows through the model's chat template, the learned span marked"
    ),
    "dragonfarm_core.conversation.feedback_store": (
        "the feedback-file readers: the Feedback tab shows events.jsonl without writing datasets"
    ),
    "dragonfarm_core.environment": "format_check: the lines `dragonfarm check` prints (Model tab)",
    "dragonfarm_core.methods": "the method table: the labels, defaults and curves the Train tab "
    "and the charts show",
    "dragonfarm_core.settings": "the settings dataclasses: widgets take their labels, help, "
    "defaults and limits from the fields",
    "dragonfarm_core.method_args": "the per-method settings groups, for the same widgets",
    "dragonfarm_core.pipelines.steps": "the Pipelines tab: the step dataclasses its step widgets "
    "are generated from (KINDS)",
    "dragonfarm_core.pipelines.chain": "the Pipelines tab: check_steps names the step that cannot "
    "run before Start",
    "dragonfarm_core.pipelines.pipeline": "the Pipelines tab: list_pipelines fills its picker",
    "dragonfarm_core.rewards": "the rewards builder: reward types and their names",
    "dragonfarm_core.rewards.checks": "the rewards builder: each reward type's options",
    "dragonfarm_core.rundir.store": "the Runs tab: which runs continue from a run, before delete",
    "dragonfarm_core.auth.profiles": "the deployment profile: what the pages may offer, where runs live",
    "dragonfarm_core.auth.upload_disk": "the server: uploads capped as a whole, copies no run needs swept",
    "dragonfarm_core.auth.session_owners": "the server: a Gradio session and its uploads belong to the "
    "login or visitor that made them",
    "dragonfarm_core.auth.visitors": "the Spaces profile: each browser's own runs folder and run caps",
    "dragonfarm_core.auth.url_guard": "the Chat tab: a shared app reaches no private address unless "
    "the admin allows it",
    "dragonfarm_core.llamacpp.location": "the Export tab: whether llama.cpp is ready, and where",
    "dragonfarm_core.llamacpp.build": "the Export tab: the build's folder and its progress",
    "dragonfarm_core.llamacpp.job": "the Export tab: the Build llama.cpp button's job",
    "dragonfarm_core.evaluation.evaluate": "the Evaluate tab: saved_evaluation, what training wrote, read "
    "without measuring",
}

# Rule 1, for now: files whose other internal imports are tolerated until their owner has
# moved them to the public API. None tolerates any internal import; a set names the modules.
# An entry that is no longer needed fails the test, so the list only shrinks.
APP_EXCEPTIONS: dict[str, frozenset[str] | None] = {}

# Rule 2's exceptions: (importing module, imported module, where) -> why.
CORE_IMPORTS_OF_THE_APP: dict[tuple[str, str, str], str] = {
    ("dragonfarm_core", "ui.layout", "app"): "dragonfarm_core.app() builds the app when called",
    ("dragonfarm_core", "gradio", "TYPE_CHECKING"): "app()'s return type, for type checkers only",
    ("dragonfarm_core.cli.commands", "ui.layout", "_app"): (
        "`dragonfarm app` is an entry point like app.py: it launches the app with its flags"
    ),
}

# Dynamic imports by a computed name: file -> why.
DYNAMIC_IMPORTS: dict[str, str] = {
    "dragonfarm_core/trainers/__main__.py": "runs the trainer module config.json's method names",
}


def in_heavy_zone(module: str) -> bool:
    """The trainers and the inference worker: subprocesses, where torch belongs."""
    return module == "dragonfarm_core.trainers" or module.startswith(
        ("dragonfarm_core.trainers.", "dragonfarm_core.inference.worker")
    )


@dataclass(frozen=True)
class Import:
    """One imported module, where it is imported, and what it implicitly runs."""

    path: str  # the importing file, relative to the root ("ui/tabs/chat.py")
    line: int
    module: str  # the imported module, absolute ("dragonfarm_core.rundir.files")
    where: str  # "" at module level, else the enclosing def/class names, or "TYPE_CHECKING"

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def module_name(rel: Path) -> str:
    """ui/tabs/chat.py -> ui.tabs.chat; dragonfarm_core/__init__.py -> dragonfarm_core."""
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files(root: Path) -> dict[str, Path]:
    """Module name -> file, for every .py file the contract covers."""
    found: dict[str, Path] = {}
    for name in SCANNED:
        top = root / name
        paths = [top] if top.is_file() else sorted(top.rglob("*.py")) if top.is_dir() else []
        for path in paths:
            found[module_name(path.relative_to(root))] = path
    return found


class _Reader(ast.NodeVisitor):
    """Collects the imports of one module, with the scope each one is in."""

    def __init__(self, rel: str, module: str, is_package: bool, known: set[str]) -> None:
        self.rel, self.known = rel, known
        self.package = module if is_package else module.rpartition(".")[0]
        self.scope: list[str] = []
        self.found: list[Import] = []
        self.dynamic: list[int] = []  # lines of dynamic imports by a computed name

    def _add(self, node: ast.AST, module: str) -> None:
        where = ".".join(self.scope)
        self.found.append(Import(self.rel, getattr(node, "lineno", 0), module, where))

    def _absolute(self, name: str | None, level: int) -> str:
        if not level:
            return name or ""
        base = self.package.split(".") if self.package else []
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join([*base, *([name] if name else [])])

    def _scoped(self, name: str, node: ast.AST) -> None:
        self.scope.append(name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node.name, node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node.name, node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node.name, node)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        if not checking:
            self.generic_visit(node)
            return
        self.visit(test)
        self.scope.append("TYPE_CHECKING")
        for child in node.body:
            self.visit(child)
        self.scope.pop()
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node.module, node.level)
        names = [a.name for a in node.names]
        submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in self.known]
        for module in submodules:
            self._add(node, module)
        if len(submodules) < len(names):  # names defined in `base` itself (or `*`)
            self._add(node, base)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                name = first.value
                level = len(name) - len(name.lstrip("."))
                self._add(node, self._absolute(name.lstrip(".") or None, level))
            else:
                self.dynamic.append(node.lineno)
        self.generic_visit(node)


@dataclass
class Tree:
    """Every covered module's imports, read from the files under `root`."""

    files: dict[str, Path]  # module -> file
    imports: dict[str, list[Import]]  # module -> its imports
    dynamic: dict[str, list[int]]  # module -> lines of computed-name dynamic imports
    root: Path

    @classmethod
    def read(cls, root: Path = ROOT) -> Tree:
        files = source_files(root)
        known = set(files)
        imports, dynamic = {}, {}
        for module, path in files.items():
            rel = path.relative_to(root).as_posix()
            reader = _Reader(rel, module, path.name == "__init__.py", known)
            reader.visit(ast.parse(path.read_text("utf-8"), filename=rel))
            imports[module], dynamic[module] = reader.found, reader.dynamic
        return cls(files, imports, dynamic, root)

    def rel(self, module: str) -> str:
        return self.files[module].relative_to(self.root).as_posix()

    def runs(self, module: str) -> Iterator[str]:
        """What importing `module` runs directly: each import and its parent packages."""
        for imp in self.imports.get(module, []):
            parts = imp.module.split(".")
            for i in range(1, len(parts) + 1):
                yield ".".join(parts[:i])


def _app_rule(tree: Tree, exceptions: Mapping[str, frozenset[str] | None]) -> list[str]:
    out = []
    for module, found in tree.imports.items():
        if not (module == "app" or module == "ui" or module.startswith("ui.")):
            continue
        rel = tree.rel(module)
        tolerated = exceptions.get(rel, frozenset())
        for imp in found:
            internal = imp.top == CORE
            if not internal or imp.module in APP_FACING:
                continue
            if tolerated is None or imp.module in tolerated:
                continue
            out.append(
                f"{rel}:{imp.line} imports {imp.module}: the app may import only the public "
                f"API (dragonfarm_core), the run-file readers and APP_FACING. Make the name "
                "public in dragonfarm_core/__init__.py, or move it."
            )
    return out


def _core_rule(tree: Tree) -> list[str]:
    out = []
    for module, found in tree.imports.items():
        if module.split(".")[0] != CORE:
            continue
        for imp in found:
            if imp.top not in APP_LIBRARIES:
                continue
            named = (module, imp.module, imp.where) in CORE_IMPORTS_OF_THE_APP
            if not named:
                place = f" (in {imp.where})" if imp.where else ""
                out.append(
                    f"{tree.rel(module)}:{imp.line} imports {imp.module}{place}: the core never "
                    "imports gradio or ui; the app calls the core, not the other way round."
                )
    return out


def _heavy_rule(tree: Tree) -> list[str]:
    """Each module outside the zone that reaches a HEAVY library, with the path it takes."""
    out = []
    for start in tree.imports:
        if in_heavy_zone(start):
            continue
        seen, queue = {start: [start]}, deque([start])
        while queue:
            current = queue.popleft()
            for target in tree.runs(current):
                if target.split(".")[0] in HEAVY:
                    chain = " -> ".join([*seen[current], target])
                    out.append(
                        f"{tree.rel(start)} imports {target} ({chain}): only "
                        "dragonfarm_core/trainers/ and dragonfarm_core/inference/worker.py may; "
                        "the app and the API start them as subprocesses."
                    )
                    queue.clear()
                    break
                if target in tree.imports and target not in seen:
                    seen[target] = [*seen[current], target]
                    queue.append(target)
    return out


def _dynamic_rule(tree: Tree) -> list[str]:
    return [
        f"{tree.rel(module)}:{line}: a dynamic import by a computed name, which this contract "
        "cannot check; import the module by name."
        for module, lines in tree.dynamic.items()
        for line in lines
        if tree.rel(module) not in DYNAMIC_IMPORTS
    ]


def violations(
    tree: Tree, app_exceptions: Mapping[str, frozenset[str] | None] = APP_EXCEPTIONS
) -> list[str]:
    """Every break of the contract, each saying where and what to do; empty when it holds."""
    return [
        *_app_rule(tree, app_exceptions),
        *_core_rule(tree),
        *_heavy_rule(tree),
        *_dynamic_rule(tree),
    ]


def unused_exceptions(tree: Tree) -> list[str]:
    """Exceptions that nothing needs any more: each should be removed from its table."""
    out = []
    for rel, tolerated in APP_EXCEPTIONS.items():
        needed = [v for v in _app_rule(tree, {}) if v.startswith(f"{rel}:")]
        listed = tolerated or frozenset()
        unused = [m for m in sorted(listed) if not any(f" imports {m}:" in v for v in needed)]
        if not needed or unused:
            what = ", ".join(unused) if unused else "its imports"
            out.append(f"APP_EXCEPTIONS[{rel!r}]: {what} no longer break the contract")
    present = {(m, i.module, i.where) for m, found in tree.imports.items() for i in found}
    out += [
        f"CORE_IMPORTS_OF_THE_APP[{key!r}]: there is no such import any more"
        for key in CORE_IMPORTS_OF_THE_APP
        if key not in present
    ]
    dynamic = {tree.rel(m) for m, lines in tree.dynamic.items() if lines}
    out += [
        f"DYNAMIC_IMPORTS[{rel!r}]: that file has no dynamic import any more"
        for rel in DYNAMIC_IMPORTS
        if rel not in dynamic
    ]
    return out
