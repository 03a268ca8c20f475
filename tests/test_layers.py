"""The layering of docs/architecture.md, enforced: a module imports only from lower layers
(imports inside functions count: a deferred import is still a dependency)."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "oloproof"

#: layer -> rank; a module may import only from a strictly lower rank
RANKS = {
    "errors": 0,
    "events": 1, "stats": 1,
    "records": 2,
    "views": 3, "config": 3, "system": 3,
    "recorder": 4, "store": 4,
    "replay": 5,
    "evaluate": 6,
    "app": 7,
    "report": 8,
    # otel: the span processor users register on their TracerProvider (an integration at the
    # edge, like the CLI; it needs the otel extra and nothing imports it)
    # integrations: instrument(obj) per framework (each behind its extra; nothing imports them)
    # testing: the contract other backends and plugins test themselves with (it needs pytest)
    "cli": 9, "otel": 9, "integrations": 9, "testing": 9, "__main__": 10, "__init__": 10,
}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "oloproof" else None


def imports(path: Path) -> list[tuple[int, str]]:
    rel = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = rel.split(".")[: -node.level]
                out.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
            elif node.module:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return out


def violations() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        me = "__init__" if rel == "oloproof.__init__" else layer_of(rel)
        if me == "__init__":
            continue
        assert me in RANKS, f"{path}: layer {me!r} is not in the layer map (docs/architecture.md)"
        for line, target in imports(path):
            other = layer_of(target)
            if other is None or other == me:
                continue
            assert other in RANKS, f"{path}:{line}: imports {target}, whose layer is not in the map"
            if RANKS[other] >= RANKS[me]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {me} imports {target} ({other})")
    return bad


def test_no_module_imports_upward_or_sideways():
    assert violations() == []


def test_the_check_catches_an_upward_import(tmp_path, monkeypatch):
    fake = tmp_path / "oloproof"
    (fake / "store").mkdir(parents=True)
    (fake / "store" / "x.py").write_text("def f():\n    from oloproof.evaluate.engine import build_suite\n")
    (fake / "recorder").mkdir()
    (fake / "recorder" / "y.py").write_text("from oloproof.store import base\n")  # a sibling layer
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    found = violations()
    assert len(found) == 2 and "store imports oloproof.evaluate.engine" in found[1] and \
        "recorder imports oloproof.store" in found[0]


def test_the_architecture_page_names_every_layer():
    page = (ROOT / "docs" / "architecture.md").read_text()
    for layer in RANKS:
        if layer not in ("__main__", "__init__"):
            assert f"`{layer}" in page, layer


# -- no import cycle between modules, imports inside functions included (issue 24) -----------

def module_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the oloproof modules it imports (``from oloproof.x import y`` counts as
    ``oloproof.x.y`` when that is a module, else ``oloproof.x``; a package's ``__init__`` is the
    package)."""
    root = package.parent
    modules = {p.relative_to(root).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
               for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        me = path.relative_to(root).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
        edges = graph.setdefault(me, set())
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in modules and t != me:
                    edges.add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    found = cycles(module_graph())
    # a package's __init__ importing its own modules is how a package exposes them; a module of
    # it importing the package back is then no cycle of code (the package is what it re-exports)
    found = [c for c in found if not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_catches_one(tmp_path):
    pkg = tmp_path / "oloproof"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("def f():\n    from oloproof.a.two import g\n")
    (pkg / "a" / "two.py").write_text("from oloproof.a import one\n")
    assert cycles(module_graph(pkg)) == [["oloproof.a.one", "oloproof.a.two"]]
