"""Contributor tooling: the series on upstream git checkouts and upstream's own hooks on it.

Modules: `flow` (import/export/drift on git checkouts), `exportfmt` (the byte layout of an
exported patch file), `tree_check` (what a clean merge can still break), `release_repo` (a git
checkout of the pinned release's files), `upstream_hooks` (patches/hooks.toml: upstream's
formatters and linters at its pins), `hook_findings` (what they say about one tree),
`upstream_lint` (what the series introduces: pristine vs patched).
"""
