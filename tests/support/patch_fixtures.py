"""Fixture builders for the patch-series tests: fake site-packages, fake series, throw-away repos.

Invariant: everything is built under the test's own temporary directory from literal text; nothing
here reads or writes the project's .venv or patches/.
"""
from __future__ import annotations

import difflib
import hashlib
import re
import subprocess
from pathlib import Path
from collections.abc import Iterable, Sequence

AUTHOR = "Patch Author <author@example.invalid>"
DATE = "Mon, 1 Jan 2024 00:00:00 +0000"
ZERO_FROM = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def numbered(tag: str, n: int = 40) -> bytes:
    """n lines that git's default funcname pattern never matches (they start with a digit)."""
    return "".join(f"{i:03d} {tag} value {i}\n" for i in range(1, n + 1)).encode()


def replace_line(data: bytes, lineno: int, text: str) -> bytes:
    lines = data.decode().splitlines(keepends=True)
    lines[lineno - 1] = text + "\n"
    return "".join(lines).encode()


def insert_lines(data: bytes, before: int, new: Sequence[str]) -> bytes:
    lines = data.decode().splitlines(keepends=True)
    lines[before - 1:before - 1] = [t + "\n" for t in new]
    return "".join(lines).encode()


def git_blob(data: bytes) -> str:
    """The id git gives `data` as a blob (what a patch's `index` line names)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def unified(path: str, old: bytes, new: bytes) -> str:
    diff = difflib.unified_diff(old.decode().splitlines(keepends=True),
                                new.decode().splitlines(keepends=True),
                                fromfile=f"a/{path}", tofile=f"b/{path}", n=3)
    return (f"diff --git a/{path} b/{path}\nindex {git_blob(old)}..{git_blob(new)} 100644\n"
            + "".join(diff))


def patch_text(subject: str, body: str, diffs: Iterable[tuple[str, bytes, bytes]]) -> bytes:
    """A patch in exactly the layout `patch export` writes."""
    head = f"{ZERO_FROM}\nFrom: {AUTHOR}\nDate: {DATE}\nSubject: [PATCH] {subject}\n\n{body}\n---\n"
    return (head + "".join(unified(p, o, n) for p, o, n in diffs)).encode()


def patch_name(index: int, subject: str) -> str:
    return f"{index:04d}-{re.sub(r'[^A-Za-z0-9.]+', '-', subject).strip('-')}.patch"


def write_series(root: Path, targets: dict[str, dict],
                 patches: dict[str, list[tuple[str, bytes]]]) -> Path:
    """patches/ with upstream.toml, and per target a folder with its patches and order file."""
    root.mkdir(parents=True, exist_ok=True)
    toml = []
    for name, t in targets.items():
        toml.append(f"[targets.{name}]")
        if "distributions" in t:
            toml.append("distributions = [" + ", ".join(f'"{d}"' for d in t["distributions"])
                        + "]")
        for key in ("distribution", "version", "repo_prefix", "site_prefix", "tests_root"):
            if key in t:
                toml.append(f'{key} = "{t[key]}"')
        toml.append(f"[targets.{name}.baseline]")
        toml += [f'"{p}" = "{d}"' for p, d in t["baseline"].items()]
        if "tests" in t:       # upstream test files the series changes
            toml.append(f"[targets.{name}.tests]")
            toml += [f'"{p}" = "{d}"' for p, d in t["tests"].items()]
        toml.append("")
        folder = root / name
        folder.mkdir(exist_ok=True)
        listed = patches.get(name, [])
        for fname, data in listed:
            (folder / fname).write_bytes(data)
        (folder / ".patches").write_text("".join(f"{f}\n" for f, _ in listed))
    (root / "upstream.toml").write_text("\n".join(toml))
    return root


def write_site(site: Path, distribution: str, version: str, files: dict[str, bytes],
               record: bool = True) -> Path:
    """A fake site-packages: the files plus `<dist>-<version>.dist-info` (METADATA, RECORD)."""
    import base64
    site.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    info = site / f"{re.sub(r'[-_.]+', '_', distribution)}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\n"
                                   f"Version: {version}\n\nA fake distribution.\n")
    if record:
        rows = [f"{rel},sha256="
                f"{base64.urlsafe_b64encode(hashlib.sha256(d).digest()).decode().rstrip('=')},"
                f"{len(d)}"
                for rel, d in files.items()]
        (info / "RECORD").write_text("\n".join(rows + [f"{info.name}/RECORD,,"]) + "\n")
    return site


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path -> bytes), for exact before/after comparisons."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout.strip()


def make_repo(path: Path, files: dict[str, bytes], message: str = "upstream release") -> Path:
    """A throw-away upstream repository whose first commit holds `files`."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Upstream Dev")
    git(path, "config", "user.email", "dev@example.invalid")
    commit_files(path, files, message)
    return path


def commit_files(repo: Path, files: dict[str, bytes], message: str) -> str:
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
        git(repo, "add", rel)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


# The fake-pkg scenario: three files, and a series of three patches (the second touches two files).
ALPHA, BETA, GAMMA = numbered("alpha"), numbered("beta"), numbered("gamma")
PRISTINE = {"src/alpha.py": ALPHA, "src/beta.py": BETA, "src/gamma.py": GAMMA}
WHY = "Why: the seam makes upstream call into torch_tensorrt_ext.\nUpstream: none yet."

A1 = replace_line(ALPHA, 10, "010 alpha patched by 0001")
A2 = replace_line(A1, 30, "030 alpha patched by 0002")
B2 = replace_line(BETA, 20, "020 beta patched by 0002")
G3 = replace_line(GAMMA, 5, "005 gamma patched by 0003")
SUBJECTS = ["Patch alpha line ten", "Patch beta and alpha", "Patch gamma line five"]
NAMES = [patch_name(i + 1, s) for i, s in enumerate(SUBJECTS)]


def target(version="1.0", baseline=None):
    return {"distribution": "fake-pkg", "version": version, "repo_prefix": "src/",
            "site_prefix": "fake_pkg/",
            "baseline": baseline or {p: sha(d) for p, d in PRISTINE.items()}}


OTHER = {"distribution": "not-installed", "version": "2.0", "repo_prefix": "",
         "site_prefix": "other/", "baseline": {}}


def three_patches(third_applies=True):
    gamma_old = GAMMA if third_applies else replace_line(GAMMA, 3, "003 gamma not upstream's")
    g_new = replace_line(gamma_old, 5, "005 gamma patched by 0003")
    return [
        (NAMES[0], patch_text(SUBJECTS[0], WHY, [("src/alpha.py", ALPHA, A1)])),
        (NAMES[1], patch_text(SUBJECTS[1], WHY, [("src/alpha.py", A1, A2),
                                                  ("src/beta.py", BETA, B2)])),
        (NAMES[2], patch_text(SUBJECTS[2], WHY, [("src/gamma.py", gamma_old, g_new)])),
    ]


def run(capsys, command: str, place: Path, patches: Path, *extra: str):
    """`torch-tensorrt-ext patch COMMAND` in this process → (exit status, stdout, stderr).

    `place` is a site-packages folder (`--site-packages`), or a contributor's checkout — a git
    repository — (`--repo`, target `fakepkg`). `revert` on a site-packages folder is given no
    series: it must work from the patch record alone."""
    from torch_tensorrt_ext.patching import cli
    if (Path(place) / ".git").exists():
        argv = ["--repo", str(place), "--target", "fakepkg", "--patches", str(patches)]
    else:
        argv = ["--site-packages", str(place)]
        argv += [] if command == "revert" else ["--patches", str(patches)]
    rc = cli.main(["patch", command, *argv, *extra])
    out, err = capsys.readouterr()
    return rc, out, err
