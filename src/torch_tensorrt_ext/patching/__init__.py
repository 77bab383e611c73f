"""The drop-in patch series: make installed (or checked-out) upstream releases call into this
package.

Invariant: the series under `patches/` is applied all-or-nothing, only onto files whose bytes are
the pinned release's (checked by sha256), and only with git's own patch machinery; every change
made to site-packages is recorded so it can be reverted byte for byte.

Modules: `bundled` (the series shipped in the package, via importlib.resources), `manifest`
(patches/upstream.toml), `series` (patch files and order files), `gitapply` (git apply in a
throw-away tree), `dists` (installed versions), `state` (the record kept in site-packages), `lock`
(one lock per site-packages), `session` (lock + cleanup of a killed run's leftovers), `site`
(apply/revert/status/check), `cli` (the `patch` sub-command), `testhook` (pause points for the
tests). The contributor tooling — import/export/drift on git checkouts and upstream's own hooks
on the series — is the subpackage `contributor/`.
"""
from .errors import PatchError

__all__ = ["PatchError"]
