"""`torch-tensorrt-ext patch ...`: the patch series on installed packages and on upstream checkouts.

Invariant: this module only parses arguments, calls `site` / `contributor.flow`, prints their
lines to stdout, and turns a `PatchError` into its message on stderr and exit status 1 (drift also
exits 1 when a patch conflicts). It holds no patching logic. The contributor tooling
(`contributor/`) is imported only inside the handlers of import / export / drift, so the end
user's apply / revert / status never load it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import bundled, site
from .errors import PatchError
from .lock import DEFAULT_TIMEOUT, TIMEOUT_ENV, LockOptions
from .manifest import load_manifest
from .series import load_series

# --patches defaults to the series shipped in the package, found when a command runs (so that
# `--help` works even where it is missing): bundled.series_dir().
PATCHES_HELP = f"the series: folder with upstream.toml (default: the package's {bundled.DISPLAY})"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "patch", help="apply/revert/check the drop-in patch series; contributor import/export",
        description="The patch series under patches/ against the pinned upstream releases.")
    sub = parser.add_subparsers(dest="patch_command", required=True)

    def installed(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--site-packages", type=Path, default=None,
                       help="site-packages to work on (default: this interpreter's)")
        p.add_argument("--patches", type=Path, default=None, help=PATCHES_HELP)
        p.add_argument("--lock-timeout", type=float, default=None, metavar="SECONDS",
                       help=f"how long to wait for another patch run on the same site-packages "
                            f"(default: ${TIMEOUT_ENV}, else {DEFAULT_TIMEOUT:g})")
        return p

    installed("apply", "apply the whole series to the installed packages (all or nothing)"
              ).set_defaults(func=_run_site(site.apply))
    p = installed("revert", "restore every file the last apply changed, byte for byte")
    p.add_argument("--force", action="store_true",
                   help="also restore files changed since apply (discarding those changes)")
    p.set_defaults(func=_run_revert)
    installed("status", "per patch: applied / not applied / stale"
              ).set_defaults(func=_run_site(site.status))
    installed("check", "prove the series applies to the pinned pristine files and introduces "
              "nothing upstream's own formatters and linters (hooks.toml) object to (writes "
              "nothing)").set_defaults(func=_run_site(site.check))

    def checkout(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--repo", type=Path, required=True, help="git checkout of the upstream")
        p.add_argument("--target", required=True, help="target name in upstream.toml")
        p.add_argument("--patches", type=Path, default=None, help=PATCHES_HELP)
        return p

    p = checkout("import", "commit the series onto the checkout's HEAD on a new branch (git am)")
    p.add_argument("--branch", default=None,
                   help="the new branch (default: tte-patches, contributor.flow.DEFAULT_BRANCH)")
    p.add_argument("--3way", dest="three_way", action="store_true",
                   help="merge three-way, using the pinned release commit as merge base")
    p.add_argument("--release", default=None,
                   help="the pinned release commit for --3way (default: tag v<version>)")
    p.set_defaults(func=_run_import)
    p = checkout("export", "rewrite the target's patch files and order file from the branch")
    p.add_argument("--base", default=None, help="branch point (default: recorded by import)")
    p.set_defaults(func=_run_export)
    p = checkout("drift", "per patch: clean / offset / fuzz / conflicts on a commit (read-only)")
    p.add_argument("--rev", default="HEAD", help="commit to test against (default: HEAD)")
    p.set_defaults(func=_run_drift)


def _print(lines: list[str]) -> None:
    for line in lines:
        print(line)


def _guard(fn):
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except PatchError as exc:
            print(f"torch-tensorrt-ext patch {args.patch_command}: error: {exc}", file=sys.stderr)
            return 1
    return run


def _patches(args: argparse.Namespace) -> Path:
    return args.patches if args.patches is not None else bundled.series_dir()


def _site(args: argparse.Namespace) -> Path:
    return args.site_packages or site.default_site_packages()


def _lock(args: argparse.Namespace) -> LockOptions:
    def waiting(message: str) -> None:
        print(f"torch-tensorrt-ext patch {args.patch_command}: {message}", file=sys.stderr,
              flush=True)
    return LockOptions(args.lock_timeout, waiting)


def _run_site(fn):
    @_guard
    def run(args: argparse.Namespace) -> int:
        _print(fn(_site(args), _patches(args), _lock(args)))
        return 0
    return run


@_guard
def _run_revert(args: argparse.Namespace) -> int:
    patches = args.patches
    if patches is None:
        try:
            patches = bundled.series_dir()
        except PatchError:
            patches = None  # revert works from the record alone; the series only widens cleanup
    _print(site.revert(_site(args), force=args.force, lock=_lock(args), patches_dir=patches))
    return 0


def _series(args: argparse.Namespace):
    return load_series(load_manifest(_patches(args)), args.target)


@_guard
def _run_import(args: argparse.Namespace) -> int:
    from .contributor import flow
    branch = {"branch": args.branch} if args.branch is not None else {}
    _print(flow.import_series(args.repo, _series(args), three_way=args.three_way,
                              release=args.release, **branch))
    return 0


@_guard
def _run_export(args: argparse.Namespace) -> int:
    from .contributor import flow
    _print(flow.export_series(args.repo, load_manifest(_patches(args)), args.target,
                              base=args.base))
    return 0


@_guard
def _run_drift(args: argparse.Namespace) -> int:
    from .contributor import flow
    lines, ok = flow.drift(args.repo, _series(args), rev=args.rev)
    _print(lines)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m torch_tensorrt_ext.patching.cli ...` = `torch-tensorrt-ext patch ...`."""
    parser = argparse.ArgumentParser(prog="torch-tensorrt-ext")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
