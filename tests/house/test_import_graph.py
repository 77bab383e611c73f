"""The package's import graph runs one way: every layer imports only layers below it, and no
module imports itself back through others.

The graph is read from the source (every `import` / `from ... import`, including those inside
functions: a lazy import is an arrow too), so it needs nothing imported and cannot be fooled by
import order. A unit is a top-level module or subpackage of `torch_tensorrt_ext`, except that each
subpackage of a package in `SUBDIVIDED` is a unit of its own (`executorch.saving`, ...), so the
jobs inside it are held to an order too.
"""
import ast
from pathlib import Path
from helpers import REPO

PKG = "torch_tensorrt_ext"
ROOT = REPO / "src" / PKG

# bottom to top; a unit may import its own modules and any unit of a lower layer, nothing else
LAYERS = [
    ("errors",),
    ("contracts",),
    ("runtime_lib", "upstream_api", "patching", "cuda"),
    ("lowering",),
    ("engines",),
    ("compiling",),
    ("export",),
    ("executorch.inspecting",),
    ("executorch.saving", "executorch.running"),
    ("executorch",),
    ("seams",),
    ("reference", "recipes"),
    ("demo",),
    ("plan_cli", "inspect_cli", "demo_cli"),
    ("cli",),
    ("__init__",),
]
SUBDIVIDED = {"executorch"}
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(mod: str) -> bool:
    rel = Path(*mod.split("."))
    return (ROOT.parent / rel).with_suffix(".py").is_file() or (ROOT.parent / rel).is_dir()


def imports_of(path: Path):
    """Every package module `path` imports, as (line, module)."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import sub` imports the submodule `pkg.sub` when there is one
            subs = [f"{target}.{a.name}" for a in node.names if _exists(f"{target}.{a.name}")]
            targets = subs or [target]
        else:
            continue
        for t in targets:
            if t == PKG or t.startswith(PKG + "."):
                yield node.lineno, t


def unit(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) > 2 and parts[1] in SUBDIVIDED:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def graph():
    return {module_name(p): (p, list(imports_of(p))) for p in sorted(ROOT.rglob("*.py"))}


def test_every_unit_has_a_layer():
    units = {unit(m) for m in graph()}
    assert units - set(LAYER) == set(), "give each new unit a layer in LAYERS"


def upward_arrows(g):
    """Every import of graph `g` into the importer's own layer or above, as a line to read."""
    bad = []
    for mod, (path, imports) in g.items():
        for line, target in imports:
            a, b = unit(mod), unit(target)
            if a != b and LAYER[b] >= LAYER[a]:
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}: {mod} ({a}, layer "
                           f"{LAYER[a]}) imports {target} ({b}, layer {LAYER[b]})")
    return bad


def test_no_arrow_runs_up_or_sideways():
    assert upward_arrows(graph()) == []


def test_no_import_circle():
    g = {m: {t for _, t in imports if t != m} for m, (_, imports) in graph().items()}
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
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
                circles.append(sorted(comp))

    for v in list(g):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_checker_sees_an_upward_arrow(tmp_path, monkeypatch):
    """The checker itself: a lower layer importing a higher one is reported, and so is a job of
    a subdivided package importing a job beside or above it."""
    pkg = tmp_path / PKG
    for d in ("contracts", "seams", "executorch/inspecting", "executorch/saving"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "executorch" / "__init__.py").write_text("")
    (pkg / "seams" / "x.py").write_text("")
    (pkg / "contracts" / "y.py").write_text("def f():\n    from ..seams import x\n")
    (pkg / "executorch" / "saving" / "w.py").write_text("")
    (pkg / "executorch" / "inspecting" / "z.py").write_text("from ..saving import w\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", pkg)
    found = dict(graph())
    assert [t for _, t in found[f"{PKG}.contracts.y"][1]] == [f"{PKG}.seams.x"]
    assert sorted(upward_arrows(found)) == [
        f"{PKG}/contracts/y.py:2: {PKG}.contracts.y (contracts, layer 1) imports {PKG}.seams.x "
        f"(seams, layer {LAYER['seams']})",
        f"{PKG}/executorch/inspecting/z.py:1: {PKG}.executorch.inspecting.z "
        f"(executorch.inspecting, layer {LAYER['executorch.inspecting']}) imports "
        f"{PKG}.executorch.saving.w (executorch.saving, layer {LAYER['executorch.saving']})",
    ]
