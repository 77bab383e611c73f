"""The contributor flow on a throw-away upstream git repository: import, export, drift."""
from __future__ import annotations


import pytest

from patch_fixtures import (run, A2, ALPHA, B2, G3, GAMMA, NAMES, PRISTINE, patch_text,  # noqa: E402
                            SUBJECTS, WHY, commit_files, git, insert_lines, make_repo,
                            replace_line, sha, snapshot, target, three_patches, unified,
                            write_series)



@pytest.fixture
def repo(tmp_path):
    """Upstream at its 1.0 release (tag v1.0): the baseline files plus one unrelated file."""
    r = make_repo(tmp_path / "upstream", {**PRISTINE, "README": b"upstream readme\n"})
    git(r, "tag", "v1.0")
    return r


@pytest.fixture
def patches(tmp_path):
    return write_series(tmp_path / "patches", {"fakepkg": target()}, {"fakepkg": three_patches()})


def checkout_state(repo):
    """Everything drift must leave alone: refs, HEAD, index, worktrees, working files."""
    files = {k: v for k, v in snapshot(repo).items() if not k.startswith(".git/")}
    return (git(repo, "rev-parse", "HEAD"), git(repo, "for-each-ref"), git(repo, "ls-files", "-s"),
            git(repo, "status", "--porcelain"), git(repo, "worktree", "list"), files)


def test_export_of_an_unchanged_import_is_byte_identical(repo, patches, capsys):
    before = snapshot(patches)
    head = git(repo, "rev-parse", "HEAD")
    rc, out, err = run(capsys, "import", repo, patches)
    assert (rc, err) == (0, "")
    assert out == (f"imported 3 patch(es) of fakepkg onto {head[:12]} as branch tte-patches in "
                   f"{repo}; edit, commit, then `torch-tensorrt-ext patch export --repo {repo} "
                   f"--target fakepkg`\n")
    assert git(repo, "log", "--reverse", "--format=%s|%an|%b", f"{head}..tte-patches"
               ).split("\n\n") == [f"{s}|Patch Author|{WHY}" for s in SUBJECTS]
    assert [(repo / p).read_bytes() for p in PRISTINE] == [A2, B2, G3]

    rc, out, err = run(capsys, "export", repo, patches)
    assert (rc, err) == (0, "")
    assert out == (f"exported 3 patch(es) to {patches / 'fakepkg'} (order file .patches "
                   f"rewritten)\n" + "".join(f"  unchanged  {n}\n" for n in NAMES))
    assert snapshot(patches) == before


def test_export_writes_a_new_commit_as_a_new_patch(repo, patches, capsys, monkeypatch):
    run(capsys, "import", repo, patches)
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2024-02-03T04:05:06+0000")
    b4 = replace_line(B2, 2, "002 beta patched by 0004")
    commit_files(repo, {"src/beta.py": b4}, "Patch beta line two\n\nWhy: the second seam.")
    rc, out, _ = run(capsys, "export", repo, patches)
    assert out.splitlines()[1:] == [f"  unchanged  {n}" for n in NAMES] + [
        "  new        0004-Patch-beta-line-two.patch"]
    assert (patches / "fakepkg/0004-Patch-beta-line-two.patch").read_bytes() == (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Upstream Dev <dev@example.invalid>\nDate: Sat, 3 Feb 2024 04:05:06 +0000\n"
        "Subject: [PATCH] Patch beta line two\n\nWhy: the second seam.\n---\n"
        + unified("src/beta.py", B2, b4)).encode()
    assert (patches / "fakepkg/.patches").read_text().splitlines() == NAMES + [
        "0004-Patch-beta-line-two.patch"]


def test_export_refuses_a_commit_outside_the_baseline(repo, patches, capsys):
    run(capsys, "import", repo, patches)
    before = snapshot(patches)
    commit_files(repo, {"README": b"changed\n"}, "Touch the readme\n\nWhy: no reason.")
    commit = git(repo, "rev-parse", "HEAD")
    base = git(repo, "rev-parse", "v1.0")
    rc, out, err = run(capsys, "export", repo, patches)
    assert (rc, out) == (1, "")
    assert err == (f"torch-tensorrt-ext patch export: error: commit {commit[:12]} ('Touch the "
                   f"readme') modifies README, which is not in [targets.fakepkg.baseline] of "
                   f"{patches / 'upstream.toml'} (nor, an upstream test file, in "
                   f"[targets.fakepkg.tests]); at {base[:12]} it is \"README\" = "
                   f"\"{sha(b'upstream readme' + bytes([10]))}\" — if that commit is the pinned "
                   f"release, add that line\n")
    assert snapshot(patches) == before


def test_export_refuses_a_commit_without_a_reason(repo, patches, capsys):
    run(capsys, "import", repo, patches)
    commit_files(repo, {"src/beta.py": replace_line(B2, 2, "002 x")}, "No reason given")
    rc, _, err = run(capsys, "export", repo, patches)
    commit = git(repo, "rev-parse", "HEAD")
    assert rc == 1 and err == (
        f"torch-tensorrt-ext patch export: error: commit {commit[:12]} ('No reason given') cannot "
        f"be exported: patch fakepkg/0004-No-reason-given.patch: the message body is empty; say "
        f"why the patch exists (to be upstreamed, with the upstream PR/issue, or why it cannot "
        f"be); reword it (git rebase -i {git(repo, 'rev-parse', 'v1.0')[:12]}) and export again\n")


def test_import_refuses_an_existing_branch_and_a_dirty_checkout(repo, patches, capsys):
    git(repo, "branch", "tte-patches")
    rc, _, err = run(capsys, "import", repo, patches)
    assert (rc, err) == (1, f"torch-tensorrt-ext patch import: error: branch tte-patches already "
                            f"exists in {repo}; delete it (git branch -D tte-patches) or pass "
                            f"--branch NAME\n")
    (repo / "README").write_text("dirty\n")
    rc, _, err = run(capsys, "import", repo, patches, "--branch", "other")
    assert (rc, err) == (1, f"torch-tensorrt-ext patch import: error: {repo} has uncommitted "
                            f"changes (M README ...); commit them (into the right patch: git "
                            f"commit --fixup / rebase -i) or stash them before `patch import`\n")
    assert git(repo, "branch", "--list", "other") == ""


def test_import_stops_on_a_conflict_and_3way_merges_it(tmp_path, repo, patches, capsys):
    moved = replace_line(GAMMA, 8, "008 gamma moved on upstream")
    head = commit_files(repo, {"src/gamma.py": moved}, "upstream edits gamma near the seam")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    git(clone, "config", "user.email", "dev@example.invalid")

    rc, out, err = run(capsys, "import", repo, patches)
    assert (rc, out) == (1, "")
    assert err.startswith(f"torch-tensorrt-ext patch import: error: import stopped at patch "
                          f"fakepkg/{NAMES[2]} (3 of 3) on tte-patches in {repo}: Patch failed "
                          f"at 0003 Patch gamma line five; error: patch "
                          f"failed: src/gamma.py:2; error: src/gamma.py: patch does not apply")
    assert err.endswith(f"Resolve the conflict in the checkout, `git add` the files, `git am "
                        f"--continue`, then `torch-tensorrt-ext patch export --repo {repo} "
                        f"--target fakepkg`; or `git am --abort` to give up (or retry with "
                        f"--3way)\n")

    rc, out, err = run(capsys, "import", clone, patches, "--3way")
    assert (rc, err) == (0, "")
    assert (clone / "src/gamma.py").read_bytes() == \
        replace_line(G3, 8, "008 gamma moved on upstream")
    assert git(clone, "rev-parse", "tte-patches~3") == head
    rc, out, _ = run(capsys, "export", clone, patches)
    assert out.splitlines()[1:] == [f"  unchanged  {NAMES[0]}", f"  unchanged  {NAMES[1]}",
                                    f"  changed    {NAMES[2]}"]


def test_drift_reports_offsets_and_conflicts_and_changes_nothing(repo, patches, capsys):
    commit_files(repo, {"src/alpha.py": insert_lines(ALPHA, 1, ["# one", "# two", "# three"]),
                        "src/gamma.py": replace_line(GAMMA, 5, "005 gamma rewritten upstream")},
                 "upstream moves alpha down and rewrites gamma")
    head = git(repo, "rev-parse", "HEAD")
    day = git(repo, "log", "-1", "--format=%cs")
    before = checkout_state(repo)
    rc, out, err = run(capsys, "drift", repo, patches)
    assert (rc, err) == (1, "")
    assert out == (
        f"drift of fakepkg (3 patch(es), pinned fake-pkg 1.0) against {repo} at {head[:12]} "
        f"({day} upstream moves alpha down and rewrites gamma)\n"
        f"  applies with offset  {NAMES[0]}\n"
        f"      src/alpha.py: Hunk #1 succeeded at 10 (offset 3 lines).\n"
        f"  applies with offset  {NAMES[1]}\n"
        f"      src/alpha.py: Hunk #1 succeeded at 30 (offset 3 lines).\n"
        f"  conflicts            {NAMES[2]}\n"
        f"      error: patch failed: src/gamma.py:2\n"
        f"      error: src/gamma.py: patch does not apply\n"
        f"summary: 0 clean, 2 applies with offset, 0 applies with fuzz, 0 already applied, "
        f"1 conflicts\n")
    assert checkout_state(repo) == before


def test_drift_reports_clean_fuzz_and_already_applied(repo, patches, capsys):
    commit_files(repo, {"src/alpha.py": replace_line(ALPHA, 8, "008 alpha edited upstream"),
                        "src/gamma.py": G3}, "upstream takes the gamma patch")
    rc, out, _ = run(capsys, "drift", repo, patches, "--rev", "HEAD")
    assert rc == 0
    assert out.splitlines()[1:] == [
        f"  applies with fuzz    {NAMES[0]}",
        "      src/alpha.py: Hunk #1 succeeded at 9 (offset 4 lines).",
        "      src/alpha.py: Context reduced to (1/1) to apply fragment at 9",
        f"  clean                {NAMES[1]}",
        f"  already applied      {NAMES[2]}",
        "      its change is already present (it applies in reverse)",
        "summary: 1 clean, 0 applies with offset, 1 applies with fuzz, 1 already applied, "
        "0 conflicts"]
    rc, out, _ = run(capsys, "drift", repo, patches, "--rev", "v1.0")
    assert rc == 0 and out.splitlines()[-1] == (
        "summary: 3 clean, 0 applies with offset, 0 applies with fuzz, 0 already applied, "
        "0 conflicts")


def test_drift_says_whether_a_missing_file_was_removed_or_added_after_the_tree(tmp_path, patches,
                                                                              capsys):
    """A file the series patches that a tree lacks is reported as not present
    upstream, saying which the history tells — removed by a commit the tree contains, or added
    by a commit after it (a tree that predates the file) — never as 'moved or deleted'."""
    r = make_repo(tmp_path / "up", {"src/alpha.py": ALPHA, "src/beta.py": PRISTINE["src/beta.py"]},
                  "before gamma existed")
    old = git(r, "rev-parse", "HEAD")
    commit_files(r, {"src/gamma.py": GAMMA}, "add gamma")
    added = git(r, "log", "-1", "--format=%h %cs %s")
    git(r, "rm", "-q", "src/gamma.py")
    git(r, "commit", "-q", "-m", "drop gamma")
    removed = git(r, "log", "-1", "--format=%h %cs %s")
    head = git(r, "rev-parse", "HEAD")

    _, out, _ = run(capsys, "drift", r, patches, "--rev", old)
    assert f"      src/gamma.py: not present upstream at {old[:12]}: added after this tree, by " \
           f"{added}\n" in out
    _, out, _ = run(capsys, "drift", r, patches)
    assert f"      src/gamma.py: not present upstream at {head[:12]}: removed by {removed}\n" \
        in out
    assert "moved or deleted" not in out


def test_a_clean_3way_merge_that_leaves_an_undefined_name_is_a_conflict(tmp_path, capsys):
    """Upstream renames a function's parameter the patch's added line uses; git merges
    the hunk without a conflict (the rename is on a line the patch keeps as context, far enough
    from its change), and the merged file reads a name nothing defines. `patch import --3way`
    reports it as a conflict naming file, line and name; the same series onto the release
    imports clean."""
    def source(param, body):
        head = [f"# line {k}" for k in range(12)]
        return ("\n".join(head + [f"def scale(x, {param}):", '    """Scale x."""',
                                  "    y = x * 2", "    z = y + 1", *body,
                                  "    return z"] + [f"# tail {k}" for k in range(6)])
                + "\n").encode()
    release = source("factor", [])
    patched = source("factor", ["    z = z * factor"])
    renamed = source("scale_by", [])
    pkg = {"version": "1.0", "distribution": "fake-pkg", "repo_prefix": "", "site_prefix": "",
           "baseline": {"src/calc.py": sha(release)}}
    patches = write_series(tmp_path / "patches", {"fakepkg": pkg}, {"fakepkg": [(
        "0001-Scale-by-the-factor.patch", patch_text(
            "Scale by the factor", WHY, [("src/calc.py", release, patched)]))]})
    up = make_repo(tmp_path / "up", {"src/calc.py": release})
    git(up, "tag", "v1.0")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(up), str(clone))
    git(clone, "config", "user.email", "dev@example.invalid")
    commit_files(clone, {"src/calc.py": renamed}, "upstream renames the parameter")

    rc, out, err = run(capsys, "import", clone, patches, "--3way")
    assert (rc, out) == (1, "")
    assert "but the merged files do not check — a conflict git did not see: src/calc.py:17: " \
           "F821 Undefined name `factor`" in err
    assert b"z = z * factor" in (clone / "src/calc.py").read_bytes()   # git did merge it

    rc, out, err = run(capsys, "import", up, patches)
    assert (rc, err) == (0, "")
