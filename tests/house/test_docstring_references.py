"""Module docstrings name only what exists: every module path, file, function, class or attribute
of the package that a module docstring of `src/torch_tensorrt_ext` names in backticks resolves.

Read from the source with `ast`, nothing imported. A dotted reference (`lowering.copier.decide`,
`engine_records.record_copy`, `Signature.to_json`) is resolved against the package: its longest
prefix that is a module — from the package root, from the docstring's own package or its parent
— then each further name as a top-level definition of that module (a function, class,
assignment or import) and, after a class, as a member of its body or a `self.` attribute its
methods set. A file (`engines/payload.py`, `payload.py`) is looked for from the repository root,
the package root, the module's own directory and its parent. Anything else — an upstream name
(`torch.export`, `executorch.exir`), a call, a value, a shape — is not checked.
"""
import ast
import re
from functools import cache
from pathlib import Path

from helpers import REPO

PKG = "torch_tensorrt_ext"
ROOT = REPO / "src" / PKG
_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_FILE = re.compile(r"[\w./-]+\.py")


def _module_file(parts: tuple[str, ...], root: Path = ROOT) -> Path | None:
    base = root.joinpath(*parts) if parts else root
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _top_level(tree: ast.AST) -> dict[str, ast.AST | None]:
    """Names a module (or class body) defines: defs, classes, assignments, imports."""
    names: dict[str, ast.AST | None] = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names[(a.asname or a.name).split(".")[0]] = None
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            names.update(_top_level(node))
            for h in getattr(node, "handlers", []):
                names.update(_top_level(h))
            names.update(_top_level(ast.Module(body=getattr(node, "orelse", []))))
    return names


def _class_members(cls: ast.ClassDef) -> set[str]:
    members = set(_top_level(cls))
    for n in ast.walk(cls):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and \
                n.value.id == "self" and isinstance(n.ctx, ast.Store):
            members.add(n.attr)
    return members


def _bases(path: Path, first: str) -> list[tuple[str, ...]]:
    """Package paths a reference in `path`'s docstring starting with `first` may start from: the
    module's own package, its parent, the package root, and the package of the one module of
    the package named `first` (`kv_rules.X` from `engines/`)."""
    rel = path.relative_to(ROOT).parts[:-1]
    named = [p for p in ROOT.rglob(f"{first}.py") if "_lib" not in p.parts]
    unique = [named[0].relative_to(ROOT).parts[:-1]] if len(named) == 1 else []
    return list(dict.fromkeys([rel, rel[:-1], (), *unique]))


def _resolves_dotted(ref: str, path: Path) -> bool | None:
    """True / False where `ref` starts with a package module; None where it names no module of
    the package (an upstream name, not checked)."""
    parts = tuple(ref.split("."))
    if parts[0] == PKG:
        parts = parts[1:]
    for base in _bases(path, parts[0]):
        for k in range(len(parts), 0, -1):
            module = _module_file(base + parts[:k])
            if module is None:
                continue
            rest = parts[k:]
            if not rest:
                return True
            names = _top_level(_tree(module))
            if module.name == "__init__.py":   # a subpackage's module named from it
                names.update({p.stem: None for p in module.parent.glob("*.py")})
            if rest[0] not in names:
                return False
            node = names[rest[0]]
            if len(rest) > 1 and isinstance(node, ast.ClassDef):
                return rest[1] in _class_members(node)
            return True
    return None


def _resolves_file(ref: str, path: Path) -> bool:
    here = path.parent
    return any((d / ref).is_file() for d in (REPO, ROOT, here, here.parent))


def stale_references(path: Path, doc: str) -> list[str]:
    stale = []
    for m in _SPAN.finditer(doc):
        ref = m.group(1).strip()
        if _FILE.fullmatch(ref):
            ok = _resolves_file(ref, path)
        elif _DOTTED.fullmatch(ref):
            ok = _resolves_dotted(ref, path)
            if ok is False and ref.split(".")[0] in ("executorch", "torch_tensorrt", "torch"):
                ok = None   # the package's `executorch` also names upstream's
        else:
            ok = None
        if ok is False:
            stale.append(f"{path.relative_to(ROOT)}: `{ref}`")
    return stale


def _docstrings():
    for path in sorted(ROOT.rglob("*.py")):
        if "_lib" in path.parts:
            continue
        doc = ast.get_docstring(_tree(path))
        if doc:
            yield path, doc


def test_every_module_docstring_names_what_exists():
    docs = list(_docstrings())
    assert len(docs) > 100
    assert [s for path, doc in docs for s in stale_references(path, doc)] == []


def test_the_checker_sees_a_stale_reference():
    here = ROOT / "compiling" / "module_form.py"
    doc = ("`lowering.copier.decide`, `engine_records.record_copy`, `copier.CopySite`, "
           "`engines/payload.py`, `module_state.py`, `torch.export.export`, `executorch.exir`, "
           "`decide(site)`, `gm.meta`, `contracts.engine.EngineInfo.copy_back`\n"
           "stale: `lowering.copier.decided`, `engine_records.tte_copy`, `engines/pay.py`, "
           "`contracts.engine.EngineInfo.copies`, `seams.nothing_here`, `payload.py`")
    assert stale_references(here, doc) == [
        f"compiling/module_form.py: `{r}`" for r in (
            "lowering.copier.decided", "engine_records.tte_copy", "engines/pay.py",
            "contracts.engine.EngineInfo.copies", "seams.nothing_here", "payload.py")]
