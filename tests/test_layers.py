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
    "cli": 9, "otel": 9, "__main__": 10, "__init__": 10,
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
