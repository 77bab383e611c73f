"""House rules the linters do not check (the conventions of docs/ARCHITECTURE.md): no Python or
C++ function of the package runs past 60 lines, every module states its invariant in a
docstring, the package raises its own errors, the code cites only documents the repository
has, and the tests import no private name of the package.

Read from the source with `ast`, so a new module or function is held to the rules the moment it
is written.
"""
import ast
from pathlib import Path
from helpers import REPO

ROOT = REPO / "src" / "torch_tensorrt_ext"
MAX_LINES = 60


def _trees():
    for path in sorted(ROOT.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def test_no_function_longer_than_sixty_lines():
    long = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert long == []


def test_every_module_states_its_invariant():
    bare = [str(p.relative_to(ROOT)) for p, tree in _trees()
            if p.stat().st_size and not ast.get_docstring(tree)]
    assert bare == []


BUILTINS = {"ValueError", "RuntimeError", "TypeError", "KeyError", "IndexError",
            "NotImplementedError", "AssertionError", "LookupError", "OSError", "Exception"}


def test_no_bare_builtin_exception_is_raised():
    """The package raises its own errors (`errors.TteError` and kin, each keeping its built-in
    base), so `except TteError` catches whatever it raises on purpose; a module `__getattr__`'s
    AttributeError is the protocol's, not a choice."""
    bare = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            exc = node.exc if isinstance(node, ast.Raise) else None
            name = exc.func if isinstance(exc, ast.Call) else exc
            if isinstance(name, ast.Name) and name.id in BUILTINS:
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno} {name.id}")
    assert bare == []


# --- C++: the same 60-line rule for the runtime's functions ------------------------------------

RUNTIME = ROOT.parents[1] / "runtime"
_CXX_CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype",
                "alignof", "static_assert", "defined"}


def _cxx_code(text: str) -> str:
    """`text` with comments and string/char literals blanked, line breaks kept."""
    import re
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2) + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i) and (m := re.match(r'R"([^(]*)\(', text[i:])):
            j = text.find(")" + m.group(1) + '"', i) + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif text[i] in "\"'":
            j = i + 1
            while j < n and text[j] != text[i]:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i] * 2)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _cxx_functions(path: Path):
    """(name, first line, lines) of every function body in a clang-formatted C++ file: a `{`
    whose statement reads `name(...)` with optional qualifiers or an initializer list — not a
    control statement, not a lambda."""
    import re
    code, stack, found = _cxx_code(path.read_text()), [], []
    signature = re.compile(r"([~\w:<>]+)\s*\(([^()]|\([^()]*\))*\)\s*"
                           r"(const|noexcept|override|final|\s|->\s*[\w:<>*&]+)*(:\s*[^{]*)?$",
                           re.S)
    for m in re.finditer(r"[{}]", code):
        if m.group() == "{":
            head = code[max(code.rfind(c, 0, m.start()) for c in ";{}") + 1:m.start()].strip()
            sig = signature.search(head)
            name = sig.group(1) if sig else ""
            is_fn = bool(sig) and name.split("::")[-1] not in _CXX_CONTROL and \
                not re.search(r"\]\s*(\([^)]*\))?\s*(mutable\s*)?(->[^{]*)?$", head)
            stack.append((m.start(), is_fn, name))
        elif stack:
            start, is_fn, name = stack.pop()
            if is_fn:
                first, last = code.count("\n", 0, start) + 1, code.count("\n", 0, m.start()) + 1
                found.append((name, first, last - first + 1))
    return found


def _cxx_files():
    return sorted(p for d in ("src", "include", "tools", "bench", "tests", "fuzz")
                  for p in (RUNTIME / d).rglob("*") if p.suffix in (".cpp", ".h", ".cu"))


def test_no_cxx_function_longer_than_sixty_lines():
    functions = {(str(p.relative_to(RUNTIME)), *f) for p in _cxx_files()
                 for f in _cxx_functions(p)}
    names = {f[1] for f in functions}
    # the reader finds the runtime's functions (a reader finding none would pass anything)
    assert len(functions) > 300 and {"DelegateExecutor::check_batch", "SharedArenas::open",
                                     "open_program", "main"} <= names
    assert sorted(f"{p}:{line} {name} ({n})" for p, name, line, n in functions
                  if n > MAX_LINES) == []


_CITED_DOC = __import__("re").compile(r"\b((?:docs/)?[A-Z][A-Z_]+\.md)\b")


def test_every_cited_document_is_in_the_repository():
    """The code cites only documents a clone has (`docs/ARCHITECTURE.md`, `CONTRACTS.md`, ...):
    a citation of a file outside the repository is a dead end for a new contributor."""
    docs = {p.name for p in (REPO / "docs").glob("*.md")} | {"README.md"}
    sources = [p for top in ("src", "runtime", "tests", "scripts", "benchmarks")
               for p in (REPO / top).rglob("*")
               if p.suffix in {".py", ".h", ".cpp", ".cu", ".sh", ".txt"}
               and "_lib" not in p.parts and "__pycache__" not in p.parts]
    missing = sorted({(str(p.relative_to(REPO)), m.group(1)) for p in sources
                      for m in _CITED_DOC.finditer(p.read_text(errors="replace"))
                      if Path(m.group(1)).name not in docs})
    assert sources and missing == []


_TRACKER_NUMBER = __import__("re").compile(r"\b[Ii]ssues? ?#?\d+|[Ii]ssues?[_-]?\d+")
_SOURCE_SUFFIXES = {".py", ".sh", ".h", ".cpp", ".cu", ".cmake", ".toml", ".in"}


def test_the_package_names_no_tracker_number():
    """The package's code and file names say what a case is, never which tracker entry reported
    it (the word for a tracker entry and its number): a reader of the code has the code, not the
    tracker."""
    found = [f"{p.relative_to(ROOT)}:{i}" for p, _ in _trees()
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if _TRACKER_NUMBER.search(line)]
    named = [str(p.relative_to(REPO)) for top in ("src", "tests", "scripts", "benchmarks")
             for p in (REPO / top).rglob("*")
             if _TRACKER_NUMBER.search(p.name) and "__pycache__" not in p.parts]
    assert found == [] and named == []


def test_tests_scripts_benchmarks_and_runtime_name_no_tracker_number():
    """The same rule for the code around the package: the tests, scripts, benchmarks and the C++
    runtime (sources, CMake files, its tests), and the root build files — their comments and
    docstrings say what a case is, and no file or folder there is named after a tracker entry."""
    sources = [p for top in ("tests", "scripts", "benchmarks", "runtime")
               for p in (REPO / top).rglob("*")
               if p.is_file() and (p.suffix in _SOURCE_SUFFIXES or p.name == "CMakeLists.txt")
               and not {"__pycache__", "_lib", ".devrun"} & set(p.parts)
               and not any(part.startswith("build") for part in p.relative_to(REPO).parts[:-1])]
    sources += [REPO / "pyproject.toml", REPO / "CMakeLists.txt"]
    found = [f"{p.relative_to(REPO)}:{i}" for p in sources
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if _TRACKER_NUMBER.search(line)]
    named = [str(p.relative_to(REPO)) for top in ("tests", "scripts", "benchmarks", "runtime")
             for p in (REPO / top).rglob("*")
             if _TRACKER_NUMBER.search(p.name) and "__pycache__" not in p.parts]
    assert len(sources) > 100 and found == [] and named == []


def _private_imports(path: Path) -> list[str]:
    """`line name` of every private name `path` imports from the package (`from
    torch_tensorrt_ext... import _name`); a dunder name (`__version__`) is not private."""
    return [f"{node.lineno} {a.name}" for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ImportFrom) and not node.level
            and (node.module or "").split(".")[0] == ROOT.name
            for a in node.names
            if a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__"))]


def test_tests_import_no_private_name_of_the_package():
    """The tests reach the package through the names it makes public: a test that needs a private
    helper tests it through the public function that uses it, or the helper is made public."""
    sources = [p for p in (REPO / "tests").rglob("*.py") if "__pycache__" not in p.parts]
    found = [f"{p.relative_to(REPO)}:{hit}" for p in sources for hit in _private_imports(p)]
    assert len(sources) > 100 and found == []
