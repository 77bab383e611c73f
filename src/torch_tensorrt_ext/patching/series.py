"""Patch files and order files: one folder per target, `.patches` listing the series in order.

Invariant: a loaded `Series` holds every patch named by the target's order file, in that order,
each parsed from a well-formed `git format-patch` style file (From line, From:/Subject: headers, a
body saying why the patch exists, then `diff --git` sections whose hunk line counts add up), that
only *modifies* files listed in the target's baseline (installed files: `Patch.files`) or among its
upstream test files (`Patch.test_files`: an upstream pull request's test changes, applied in
upstream checkouts and to the project's copies of upstream's tests, never in site-packages). Any
`*.patch` in the folder that the order file does not name is an error, so a forgotten patch
cannot silently drop out of the series.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import PatchError
from .manifest import Manifest, Target

ORDER_FILE = ".patches"
_FROM_LINE = re.compile(r"From [0-9a-f]{40} Mon Sep 17 00:00:00 2001")
_DIFF_GIT = re.compile(r"diff --git a/(\S+) b/(\S+)")
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_UNSUPPORTED = ("new file mode", "deleted file mode", "old mode", "new mode", "rename from",
                "rename to", "copy from", "copy to", "similarity index", "dissimilarity index",
                "Binary files", "GIT binary patch")


@dataclass(frozen=True)
class Patch:
    """One patch file of a series."""

    name: str                 # file name, e.g. "0001-Fix-thing.patch"
    path: Path
    data: bytes
    author: str
    subject: str              # without the "[PATCH] " prefix
    body: str                 # why the patch exists
    files: tuple[str, ...]    # repository paths it modifies, in order of appearance
    test_files: tuple[str, ...] = ()   # ... of which upstream test files (not in `files`)

    def sections(self, which: str = "site") -> bytes:
        """The patch with only its installed files' sections ("site"), only its upstream test
        files' ("tests"), or whole ("all"); headers and signature kept."""
        if which == "all":
            return self.data
        if which not in ("site", "tests"):
            raise PatchError(f"{self.label}: no section kind {which!r} (site, tests or all)")
        keep = set(self.files if which == "site" else self.test_files)
        lines = self.data.split(b"\n")
        # the format-patch signature: the last "-- " line with no diff section after it (a
        # removed "- " line inside a hunk reads the same)
        end = next((i for i in range(len(lines) - 1, -1, -1) if lines[i] == b"-- "), len(lines))
        if any(ln.startswith(b"diff --git ") for ln in lines[end:]):
            end = len(lines)
        out, taking = [], True
        for line in lines[:end]:
            m = _DIFF_GIT.fullmatch(line.decode("utf-8"))
            if m:
                taking = m.group(1) in keep
            if taking:
                out.append(line)
        kept = b"\n".join(out + lines[end:])
        return kept if kept.endswith(b"\n") or not self.data.endswith(b"\n") else kept + b"\n"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.path.parent.name}/{self.name}"


@dataclass(frozen=True)
class Series:
    """The ordered patches of one target."""

    target: Target
    folder: Path
    patches: tuple[Patch, ...]

    @property
    def files(self) -> tuple[str, ...]:
        """Every installed file the series modifies, each once, in first-touched order."""
        return _first_seen(p.files for p in self.patches)

    @property
    def test_files(self) -> tuple[str, ...]:
        """Every upstream test file the series modifies, each once, in first-touched order."""
        return _first_seen(p.test_files for p in self.patches)


def _first_seen(groups) -> tuple[str, ...]:
    seen: list[str] = []
    for files in groups:
        seen.extend(f for f in files if f not in seen)
    return tuple(seen)


def load_series(manifest: Manifest, target_name: str) -> Series:
    """Read `<patches>/<target>/.patches` and every patch it names; validate them all."""
    target = manifest.target(target_name)
    folder = manifest.root / target.name
    order = folder / ORDER_FILE
    try:
        text = order.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PatchError(f"{target.name}: no order file {order}; create it (one patch file name "
                         f"per line, empty for no patches)") from None
    names = read_order(order, text)
    listed = set(names)
    strays = sorted(p.name for p in folder.glob("*.patch") if p.name not in listed)
    if strays:
        raise PatchError(f"{target.name}: {', '.join(strays)} in {folder} not listed in {order}; "
                         f"add it to the order file or delete it")
    patches = []
    for name in names:
        path = folder / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise PatchError(f"{order} names {name}, but {path} does not exist; restore the "
                             f"patch file or remove the line") from None
        patches.append(split_tests(target, parse_patch(path, data)))
    return Series(target, folder, tuple(patches))


def split_tests(target: Target, patch: Patch) -> Patch:
    """`patch` with the upstream test files it modifies moved from `files` to `test_files`;
    refuses a file that is neither an installed file nor a test file the target pins."""
    for repo_path in patch.files:
        if repo_path not in target.baseline and repo_path not in target.tests:
            raise PatchError(
                f"patch {patch.label} modifies {repo_path}, which is not in "
                f"{target.baseline_key_hint()}; add its pristine sha256 for "
                f"{target.distribution} {target.version} there (an upstream test file under "
                f"[targets.{target.name}.tests]), or drop the hunk")
    return dataclasses.replace(
        patch, files=tuple(f for f in patch.files if f in target.baseline),
        test_files=tuple(f for f in patch.files if f in target.tests))


def read_order(order: Path, text: str) -> list[str]:
    """Patch file names from an order file: one per line; blank lines and `#` comments skipped."""
    names: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if "/" in name or "\\" in name or not name.endswith(".patch"):
            raise PatchError(f"{order}:{lineno}: {name!r} is not a patch file name in this "
                             f"folder (expected NNNN-subject.patch)")
        if name in names:
            raise PatchError(f"{order}:{lineno}: {name} is listed twice; keep one line")
        names.append(name)
    return names


def parse_patch(path: Path, data: bytes) -> Patch:
    """Parse and validate one format-patch style file."""
    where = f"patch {path.parent.name}/{path.name}"
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise PatchError(f"{where} is not UTF-8 ({exc}); regenerate it with "
                         f"`torch-tensorrt-ext patch export`") from None
    if not _FROM_LINE.fullmatch(lines[0]):
        raise PatchError(f"{where}: line 1 must be 'From <40 hex digits> Mon Sep 17 00:00:00 "
                         f"2001' (git format-patch --zero-commit); found {lines[0][:60]!r}")
    headers, i = _headers(where, lines)
    subject = headers.get("subject", "")
    if not subject.startswith("[PATCH]"):
        raise PatchError(f"{where}: needs a 'Subject: [PATCH] ...' header")
    if not headers.get("from"):
        raise PatchError(f"{where}: needs a 'From: Name <email>' header")
    body, i = _body(lines, i)
    if not body.strip():
        raise PatchError(f"{where}: the message body is empty; say why the patch exists (to be "
                         f"upstreamed, with the upstream PR/issue, or why it cannot be)")
    files = _diffs(where, lines, i)
    return Patch(name=path.name, path=path, data=data, author=headers["from"],
                 subject=subject[len("[PATCH]"):].strip(), body=body, files=tuple(files))


def _headers(where: str, lines: list[str]) -> tuple[dict, int]:
    headers: dict = {}
    key = None
    i = 1
    while i < len(lines) and lines[i] != "":
        line = lines[i]
        if line[:1] in (" ", "\t") and key:
            headers[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            headers[key] = value.strip()
        else:
            raise PatchError(f"{where}: line {i + 1}: {line[:60]!r} is not a mail header; the "
                             f"headers end at the first blank line")
        i += 1
    return headers, i + 1


def _body(lines: list[str], i: int) -> tuple[str, int]:
    start = i
    while i < len(lines) and lines[i] != "---" and not lines[i].startswith("diff --git "):
        i += 1
    body = "\n".join(lines[start:i]).strip("\n")
    if i < len(lines) and lines[i] == "---":
        i += 1
        while i < len(lines) and not lines[i].startswith("diff --git "):
            i += 1                 # an optional diffstat
    return body, i


def _diffs(where: str, lines: list[str], i: int) -> list[str]:
    files: list[str] = []
    if i >= len(lines):
        raise PatchError(f"{where}: no 'diff --git' section; a patch must change a file")
    while i < len(lines):
        line = lines[i]
        if line == "-- ":          # format-patch signature: the patch ends here
            break
        if not line.startswith("diff --git "):
            if line == "" and all(rest == "" for rest in lines[i:]):
                break
            raise PatchError(f"{where}: line {i + 1}: expected 'diff --git', found "
                             f"{line[:60]!r}")
        i, repo_path = _one_diff(where, lines, i)
        if repo_path in files:
            raise PatchError(f"{where}: {repo_path} appears in two diff sections; merge them")
        files.append(repo_path)
    return files


def _one_diff(where: str, lines: list[str], i: int) -> tuple[int, str]:
    m = _DIFF_GIT.fullmatch(lines[i])
    if not m or m.group(1) != m.group(2):
        raise PatchError(f"{where}: line {i + 1}: {lines[i][:80]!r} must read "
                         f"'diff --git a/PATH b/PATH' (same path; renames are not supported)")
    repo_path = m.group(1)
    pure = PurePosixPath(repo_path)
    if pure.is_absolute() or ".." in pure.parts:
        raise PatchError(f"{where}: line {i + 1}: {repo_path} must be a relative repository path")
    i += 1
    while i < len(lines) and not lines[i].startswith("--- "):
        if lines[i].startswith(_UNSUPPORTED):
            raise PatchError(f"{where}: {repo_path}: '{lines[i][:40]}' — only modifications of "
                             f"existing text files are supported (no new, deleted, renamed, "
                             f"binary or mode-changed files)")
        if lines[i].startswith(("diff --git ", "@@")):
            break
        i += 1
    if (i + 1 >= len(lines) or lines[i] != f"--- a/{repo_path}"
            or lines[i + 1] != f"+++ b/{repo_path}"):
        raise PatchError(f"{where}: {repo_path}: expected '--- a/{repo_path}' and "
                         f"'+++ b/{repo_path}' after line {i}")
    i += 2
    hunks = 0
    while i < len(lines) and lines[i].startswith("@@"):
        i = _hunk(where, repo_path, lines, i)
        hunks += 1
    if not hunks:
        raise PatchError(f"{where}: {repo_path}: no '@@ -a,b +c,d @@' hunk at line {i + 1}")
    return i, repo_path


def _hunk(where: str, repo_path: str, lines: list[str], i: int) -> int:
    m = _HUNK.match(lines[i])
    if not m:
        raise PatchError(f"{where}: {repo_path}: line {i + 1}: malformed hunk header "
                         f"{lines[i][:60]!r}")
    old = int(m.group(2) if m.group(2) is not None else 1)
    new = int(m.group(4) if m.group(4) is not None else 1)
    header_line = i + 1
    i += 1
    while old > 0 or new > 0:
        if i >= len(lines) or (i == len(lines) - 1 and lines[i] == ""):
            break                  # the file's final newline is not an empty context line
        tag = lines[i][:1]
        if tag in (" ", ""):
            old, new = old - 1, new - 1
        elif tag == "-":
            old -= 1
        elif tag == "+":
            new -= 1
        elif tag != "\\":
            break
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):
        i += 1                     # "\ No newline at end of file"
    if old != 0 or new != 0:
        raise PatchError(f"{where}: {repo_path}: the hunk at line {header_line} is corrupt (its "
                         f"header's line counts do not match its lines); regenerate the patch "
                         f"with `torch-tensorrt-ext patch export`")
    return i
