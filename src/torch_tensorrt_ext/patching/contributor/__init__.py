"""Contributor tooling: the series on upstream git checkouts and upstream's own hooks on it.

Invariant: the end user's commands never import it. Outside this subpackage it is imported only
inside functions — `cli`'s handlers of `patch import` / `export` / `drift`, and `site.check`'s
run of upstream's hooks — never at a module's top level, so `patch apply` / `revert` / `status`
load none of it (tests/patching/test_patch_end_user_imports.py runs them and looks). It imports
the rest of `patching`; the rest of `patching` never imports it at module level.

Modules: `flow` (import/export/drift on git checkouts), `exportfmt` (the byte layout of an
exported patch file), `tree_check` (what a clean merge can still break), `release_repo` (a git
checkout of the pinned release's files), `upstream_hooks` (patches/hooks.toml: upstream's
formatters and linters at its pins), `hook_findings` (what they say about one tree),
`upstream_lint` (what the series introduces: pristine vs patched).
"""
