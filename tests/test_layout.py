"""The house plan holds: arrows point down, wings stand alone, no import circle.

Read from the source (``ast``), imports inside functions included, so a lazy import
cannot hide a circle. The floors, lowest first: the torch-free helpers
(``registry``, ``datasets``, ``files``), ``base``, the shared machinery (``ot``,
``nn``, ``losses``, ``representation``, ``metrics``), the wings (``cluster.<method>``),
and on top the front doors (``pipeline``, ``compare``, ``cli``, the package itself).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "sktransfer_cluster"
PACKAGE = "sktransfer_cluster"


def _module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path):
    """``(module imported, names imported)`` for every import statement in ``path``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = tuple(alias.name for alias in node.names)
            if node.module is None:  # "from . import x": x is a module of that package
                found += [(f"{target}.{n}", ()) for n in names]
            else:
                found.append((target, names))
    return [(t, n) for t, n in found if t == PACKAGE or t.startswith(PACKAGE + ".")]


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(target):
    """The module of the package that ``target`` names (a module, or a name in a package)."""
    while target not in MODULES and "." in target:
        target = target.rpartition(".")[0]
    return target


GRAPH = {m: {_resolve(t) for t, _ in _imports(p)} - {m} for m, p in MODULES.items()}


def _floor(module):
    parts = module.split(".")
    if len(parts) == 1:
        return 5  # the package's __init__: public names, lazy
    top = parts[1]
    if top in ("registry", "datasets", "files", "errors", "outputs"):
        return 0
    if top == "base":
        return 1
    if top in ("ot", "nn", "losses", "representation", "metrics"):
        return 2
    if top == "cluster":
        return 3 if len(parts) > 2 else 4  # a wing, or cluster/__init__ (lazy names)
    return 5  # pipeline, compare, cli, __main__


def _wing(module):
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "cluster" else None


def test_no_module_imports_a_module_above_its_floor():
    upward = [
        (m, t) for m, targets in GRAPH.items() for t in targets
        if _floor(t) > _floor(m) and not (_floor(m) == 4 and t == PACKAGE)
    ]
    assert upward == []


def test_no_wing_imports_another_wing():
    crossing = [(m, t) for m, targets in GRAPH.items() for t in targets if _wing(m) and _wing(t) and _wing(m) != _wing(t)]
    assert crossing == []


def test_there_is_no_import_circle():
    seen, on_path, circles = set(), [], []

    def visit(module):
        if module in on_path:
            circles.append(on_path[on_path.index(module):] + [module])
            return
        if module in seen:
            return
        seen.add(module)
        on_path.append(module)
        for target in sorted(GRAPH.get(module, ())):
            # A package's __init__ re-exports its own modules: importing one of them runs it first.
            if not target.startswith(module + "."):
                visit(target)
        on_path.pop()

    for module in sorted(GRAPH):
        visit(module)
    assert circles == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_is_imported_across_modules_except_from_base(module):
    private = [
        (target, name)
        for target, names in _imports(MODULES[module])
        for name in names
        if name.startswith("_") and not name.startswith("__")
        and not _resolve(target).startswith(f"{PACKAGE}.base")
    ]
    assert private == []
