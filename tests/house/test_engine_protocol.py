"""One engine-module protocol (`engines.engine_module`): no module outside `engines/` asks which
engine it holds. It neither tests an engine module's class (`isinstance` / `issubclass` with an
engine class), nor reads its kind or this project's members by name (`getattr(m, "engine_kind")`,
`copies_in_pytorch`), nor spells the copy record's attribute (`tte_copy_back`) — it asks the
protocol's accessors, which answer for every engine module.

Read from the source with `ast` (and the text, for the attribute's name), so a new caller is held
to it the moment it is written.
"""
import ast
from pathlib import Path

from helpers import REPO

ROOT = REPO / "src" / "torch_tensorrt_ext"
ENGINE_CLASSES = {"ReferenceEngineModule", "TorchTensorRTModule", "PythonTorchTensorRTModule",
                  "EngineModule"}
MEMBERS = {"engine_kind", "copies_in_pytorch", "tte_copy_back"}
COPY_RECORD_NAME = "tte_copy_back"


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))}


def findings(text: str, where: str) -> list[str]:
    """Every place in module source `text` that asks an engine module which engine it is."""
    found = [f"{where}:{i} spells {COPY_RECORD_NAME!r}"
             for i, line in enumerate(text.splitlines(), 1) if COPY_RECORD_NAME in line]
    for node in ast.walk(ast.parse(text, where)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        fn, args = node.func.id, node.args
        if fn in ("isinstance", "issubclass") and len(args) == 2 and \
                _names(args[1]) & ENGINE_CLASSES:
            found.append(f"{where}:{node.lineno} tests an engine's class")
        if fn in ("getattr", "hasattr", "setattr") and len(args) >= 2 and \
                isinstance(args[1], ast.Constant) and args[1].value in MEMBERS:
            found.append(f"{where}:{node.lineno} reads {args[1].value!r} by name")
    tree = ast.parse(text, where)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):   # the flag read; the protocol's accessor of that name called
        if isinstance(node, ast.Attribute) and node.attr == "copies_in_pytorch" and \
                id(node) not in called:
            found.append(f"{where}:{node.lineno} reads 'copies_in_pytorch'")
    return found


def test_no_caller_outside_engines_asks_which_engine_it_holds():
    sources = [p for p in sorted(ROOT.rglob("*.py"))
               if "_lib" not in p.parts and p.relative_to(ROOT).parts[0] != "engines"]
    assert len(sources) > 100
    assert [f for p in sources
            for f in findings(p.read_text(), str(p.relative_to(ROOT)))] == []


def test_the_checker_sees_each_question():
    text = ('from .x import ReferenceEngineModule\n'
            'def f(m):\n'
            '    if isinstance(m, (int, ReferenceEngineModule)):\n'
            '        return getattr(m, "engine_kind", "tensorrt")\n'
            '    return m.copies_in_pytorch or getattr(m, "tte_copy_back", ())\n'
            'def h(m):\n'
            '    return engine_module.copies_in_pytorch(m)\n')
    assert findings(text, "m.py") == [
        "m.py:5 spells 'tte_copy_back'",
        "m.py:3 tests an engine's class",
        "m.py:4 reads 'engine_kind' by name",
        "m.py:5 reads 'tte_copy_back' by name",
        "m.py:5 reads 'copies_in_pytorch'",
    ]
    # a blob's metadata field of the same name is no engine module's kind
    assert findings("def g(meta):\n    return meta.engine_kind\n", "g.py") == []


def test_the_protocol_answers_for_both_engine_kinds():
    """The accessors' defaults are torch-tensorrt's module's answers; a reference engine
    answers through its own members."""
    import torch
    from torch_tensorrt_ext.engines import engine_module as em
    from torch_tensorrt_ext.engines.reference_engine import ReferenceEngineModule

    class TensorRTLike(torch.nn.Module):
        input_binding_names = ["x"]
        output_binding_names = ["output0"]

    m = TensorRTLike()
    assert em.is_engine_module(m) and not em.is_engine_module(torch.nn.Linear(1, 1))
    assert (em.kind(m), em.copies_in_pytorch(m), em.size_outputs(m), em.own_call(m),
            em.returned_outputs(m)) == ("tensorrt", False, (), None, None)
    assert (ReferenceEngineModule.engine_kind, ReferenceEngineModule.copies_in_pytorch) == \
        ("reference", True)
    assert Path(em.__file__).parent.name == "engines"
