"""Upstream's own formatters and linters on the series (`patch check`, patches/hooks.toml).

The attribution (a finding the pristine file has is upstream's, wherever the patch moves it;
one it lacks is the series') is shown with the hooks that need no tool; the real series is shown
passing every hook at upstream's pins, and failing on a deliberately mis-formatted hunk.
"""
from __future__ import annotations

import shutil
import tomllib
import sysconfig
from pathlib import Path

import pytest

from helpers import REPO
from torch_tensorrt_ext.patching import cli
from torch_tensorrt_ext.patching.errors import PatchError
from torch_tensorrt_ext.patching.contributor.hook_findings import Finding, changed_regions
from torch_tensorrt_ext.patching.contributor.upstream_hooks import load_hooks, tool_env
from torch_tensorrt_ext.patching.contributor.upstream_lint import introduced, line_map, lint_series

PATCHES = REPO / "patches"
SITE = Path(sysconfig.get_paths()["purelib"])
HOOKS = load_hooks(PATCHES)


def _grep_only(target: str):
    """The target's hooks that run no tool (grep and newline), as a hook set of their own."""
    hs = HOOKS[target]
    return type(hs)(hs.target, hs.env, tuple(h for h in hs.hooks if h.mode in ("grep", "newline")),
                    {}, source=hs.source)


def test_a_finding_the_pristine_file_has_is_upstreams_even_where_the_patch_moves_it():
    pristine = b"import torch  # NVIDIA-INTERNAL!NVIDIA-INTERNAL\nx = 1\n"
    # the patch adds two lines above upstream's marker, and one marker of its own
    patched = b"a = 0\nb = 0\nimport torch  # NVIDIA-INTERNAL!NVIDIA-INTERNAL\nx = 1\n" \
              b"y = 2  # !NVIDIA-INTERNAL\n"
    report = lint_series(_grep_only("torch_tensorrt"), {"py/m.py": pristine},
                         {"py/m.py": patched}, None, {"py/m.py": ["0003"]})
    assert [(f.hook, f.path, f.line) for f in report.introduced] == [
        ("dont-commit-upstream", "py/m.py", 5)]
    row = next(r for r in report.lines if "dont-commit-upstream" in r)
    assert row.split()[1:4] == ["2", "finding(s)", "on"] and "1 upstream's" in row
    assert "(file patched by 0003)" in "\n".join(report.lines)


def test_the_same_finding_twice_where_upstream_had_it_once_is_one_of_ours():
    a = Finding("h", "f.py", 3, "message at line 3")
    moved = Finding("h", "f.py", 9, "message at line 9")     # line numbers aside: same finding
    extra = Finding("h", "f.py", 20, "message at line 20")
    maps = {"f.py": {9: 3}}                                  # the patch carried line 3 to 9
    assert introduced([a], [moved, extra], maps) == [extra]
    assert introduced([a], [extra], {}) == []                 # moved, not added
    assert introduced([], [moved], maps) == [moved]


def test_a_fixers_rewrite_is_keyed_by_what_it_changes_not_where():
    old = b"a = 1\nf(x,y)\n"
    first = changed_regions("black", "p.py", old, b"a = 1\nf(x, y)\n")
    later = changed_regions("black", "p.py", b"z = 0\n" + old, b"z = 0\na = 1\nf(x, y)\n")
    assert [(f.line, f.key) for f in first] == [(2, later[0].key)] and later[0].line == 3
    assert line_map(old, b"z = 0\n" + old) == {2: 1, 3: 2}


def test_executorchs_newline_linter_flags_a_hunk_that_drops_the_final_newline():
    report = lint_series(_grep_only("executorch"), {"exir/a.py": b"x = 1\n"},
                         {"exir/a.py": b"x = 1\ny = 2"}, None)
    assert [(f.hook, f.line) for f in report.introduced] == [("NEWLINE", 2)]


def test_a_series_touching_a_file_whose_hook_is_not_pinned_is_refused():
    with pytest.raises(PatchError, match=r"runtime/x\.cpp.*clang-format 14\.0\.6.*not pinned"):
        lint_series(HOOKS["torch_tensorrt"], {"runtime/x.cpp": b""}, {"runtime/x.cpp": b"x"},
                    None)


def _tools_or_skip():
    for hs in HOOKS.values():
        try:
            tool_env(hs, [f"{p}.py" for p in ("py/a", "exir/a")])
        except PatchError as exc:
            pytest.skip(f"upstream's hook tools are not installed: {exc}")


def _series_copy(tmp_path: Path) -> Path:
    shutil.copytree(PATCHES, tmp_path / "patches")
    (tmp_path / "third_party").symlink_to(REPO / "third_party")   # upstream's pinned tests
    return tmp_path / "patches"


def test_the_series_introduces_nothing_upstreams_hooks_object_to(capsys):
    _tools_or_skip()
    assert cli.main(["patch", "check", "--site-packages", str(SITE)]) == 0
    out = capsys.readouterr().out
    rows = [r for r in out.splitlines() if "finding(s) on the patched files" in r]
    assert {r.split()[0] for r in rows} >= {"black", "isort", "ruff", "mypy", "typos",
                                            "trailing-whitespace", "FLAKE8", "UFMT", "NEWLINE"}
    assert all(r.endswith(" 0 introduced by the series") for r in rows), rows
    assert any("isort" in r and not r.split(":")[1].startswith(" 0 upstream") for r in rows)


@pytest.mark.parametrize("target, file, old, new, hooks", [
    ("torch_tensorrt", "0008-conversion-index_copy-KV-path-writes-consecutive-pos.patch",
     "+    return bool(start == 0 and step == 1)\n",
     "+    return bool(start==0 and step==1)  \n", {"black", "trailing-whitespace", "ruff"}),
    ("executorch", "0002-emit-a-named-mutable-buffer-s-initial-value-never-sh.patch",
     "+            if allocation_info and (\n", "+            if allocation_info and(\n",
     {"UFMT", "FLAKE8"}),
])
def test_a_mis_formatted_hunk_fails_the_check_naming_hook_file_and_patch(
        tmp_path, capsys, target, file, old, new, hooks):
    _tools_or_skip()
    patches = _series_copy(tmp_path)
    path = patches / target / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    rc = cli.main(["patch", "check", "--site-packages", str(SITE), "--patches", str(patches)])
    err = capsys.readouterr().err
    assert rc == 1
    ours = [ln for ln in err.splitlines() if ln.startswith("      ")]
    assert {ln.split("[")[1].split("]")[0] for ln in ours} == hooks
    assert all(f"(file patched by {file[:4]}" in ln or f", {file[:4]}" in ln for ln in ours)
    assert f"{len(ours)} finding(s) of upstream's hooks introduced by the series" in err


def test_every_hooks_tool_is_pinned_at_its_version_in_the_targets_dependency_group():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["dependency-groups"]
    for hs in HOOKS.values():
        pins = set(extras[hs.env])
        tools = {f"{h.package}=={h.version}" for h in hs.hooks if h.package}
        assert tools and tools <= pins, (hs.target, sorted(tools - pins))
