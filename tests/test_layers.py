"""The house has no arrow running back up: every import inside ``xaikit`` (lazy ones in
functions included) points to a lower layer, and only ``xaikit/backend/`` (and the framework
modules a user imports on purpose) imports torch or TensorFlow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "xaikit"

#: layers, bottom first; a package may import only from layers below its own
LAYERS = [
    {"errors", "_lazy"},
    {"layout", "modes", "files", "checks", "summary"},
    {"backend"},
    {"models", "dataset", "op", "inspect", "denormalize", "targets"},
    {"viz"},
    {"xai"},
    {"trace", "schedule"},
    {"evaluate", "analyze"},
    {"network", "pipeline", "estimator", "integrations"},
    {"demo", "architecture"},  # the main job reads like user code: ``import xaikit as xk``
    {"cli"},
    {"__main__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
FRAMEWORKS = {"torch", "tensorflow", "keras", "tf_keras", "lightning", "pytorch_lightning"}
#: framework-named modules that a user imports on purpose (DESIGN.md)
FRAMEWORK_MODULES = {
    "architecture/torch.py",
    "architecture/tensorflow.py",
    "integrations/keras.py",
    "integrations/lightning.py",
    "integrations/torch.py",
}


def _unit(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.name != "__init__.py" else "xaikit"


def _imports(path: Path) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
    return out


FILES = sorted(p for p in ROOT.rglob("*.py") if _unit(p) != "xaikit")


def test_every_package_has_a_layer() -> None:
    units = {_unit(p) for p in FILES}
    assert units <= set(RANK), f"packages without a layer: {sorted(units - set(RANK))}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    src = _unit(path)
    wrong = []
    for module, line in _imports(path):
        parts = module.split(".")
        if parts[0] == "xaikit":
            dst = parts[1] if len(parts) > 1 else "xaikit"
            if dst == src:
                continue
            too_high = RANK["demo"] if dst == "xaikit" else RANK.get(dst, 99)
            if (dst == "xaikit" and RANK[src] < too_high) or (dst != "xaikit" and too_high >= RANK[src]):
                wrong.append(f"line {line}: {module} ({src} -> {dst})")
        elif parts[0] in FRAMEWORKS and src != "backend":
            if str(path.relative_to(ROOT)) not in FRAMEWORK_MODULES:
                wrong.append(f"line {line}: {module} (only xaikit/backend/ imports a framework)")
    assert not wrong, "imports running up or sideways:\n" + "\n".join(wrong)


def test_private_backend_modules_stay_inside() -> None:
    """No package outside ``backend/`` imports a private ``xaikit.backend._*`` module."""
    wrong = [
        f"{p.relative_to(ROOT)}:{line}: {module}"
        for p in FILES
        if _unit(p) != "backend"
        for module, line in _imports(p)
        if module.startswith("xaikit.backend.")
        and any(part.startswith("_") for part in module.split(".")[2:])
    ]
    assert not wrong, wrong


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    fake = ROOT / "trace" / "io.py"
    source = fake.read_text(encoding="utf-8") + "\n\ndef _x():\n    import xaikit.network\n"
    copy = tmp_path / "io.py"
    copy.write_text(source, encoding="utf-8")
    found = [m for m, _ in _imports(copy) if m == "xaikit.network"]
    assert found and RANK["network"] > RANK["trace"]


def test_private_xai_modules_stay_inside() -> None:
    """No package outside ``xai/`` imports a private ``xaikit.xai._*`` module (or a private name
    of an ``xai`` module): what the layers above use of the engine is ``xaikit.xai.internal``."""
    wrong = []
    for p in FILES:
        if _unit(p) == "xai":
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("xaikit.xai"):
                parts = node.module.split(".")[2:]
                private = [n.name for n in node.names if n.name.startswith("_")]
                if any(part.startswith("_") for part in parts) or private:
                    wrong.append(f"{p.relative_to(ROOT)}:{node.lineno}: {node.module} {private or ''}")
    assert not wrong, wrong


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Every import between xaikit's modules (lazy ones inside functions too): ``from pkg import
    name`` is an edge to the submodule ``pkg.name`` where there is one, else to ``pkg``."""
    modules = {_module_of(p): p for p in ROOT.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.append(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets.extend(alias.name for alias in node.names)
            edges[mod].update(t for t in targets if t in modules and t != mod)
    return edges


def test_no_import_cycles() -> None:
    """No circle of imports anywhere in the package, inside a package included (Tarjan's strongly
    connected components of the module graph, lazy imports counted)."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_circle() -> None:
    graph = _graph()
    assert "xaikit.xai.registry" in graph["xaikit.xai.gradient.sweep"]  # an edge it must see
