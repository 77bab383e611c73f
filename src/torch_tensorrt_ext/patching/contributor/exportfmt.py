"""The canonical byte layout of an exported patch file.

Invariant: a patch file is what `git format-patch` with `FORMAT_PATCH_ARGS` writes for one commit
(zero commit hash, no signature, no diffstat, no numbering, fixed prefixes, context and diff
algorithm, full `index <old blob>..<new blob>` lines, whatever the user's git configuration), with
one normalisation: a `---` line separates the message from the diff. The index lines name the
blobs of the pinned release (and of the patches before it), so `git am -3` onto a moved upstream
can build the ancestor and merge three-way. `normalise_patch` is idempotent, and `git am` of its
output re-creates the same commit message, author and date.
"""
from __future__ import annotations

FORMAT_PATCH_ARGS = (
    "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false", "-c", "diff.relative=false",
    "-c", "format.signOff=false", "-c", "format.coverLetter=false",
    "-c", "format.useAutoBase=false", "-c", "core.quotePath=true",
    "format-patch", "--zero-commit", "--no-signature", "--no-stat", "--no-numbered",
    "--full-index", "--no-notes", "--no-thread", "--no-cover-letter", "--no-attach",
    "--no-renames", "--no-color", "--no-ext-diff", "--no-textconv", "--unified=3",
    "--diff-algorithm=myers", "--src-prefix=a/", "--dst-prefix=b/", "--encode-email-headers",
    "--suffix=.patch", "--no-base", "--no-add-header", "--no-to", "--no-cc",
)

def normalise_patch(raw: bytes) -> bytes:
    """Put a `---` line between the message and the first diff."""
    lines = raw.decode("utf-8").split("\n")
    first_diff = next((i for i, ln in enumerate(lines) if ln.startswith("diff --git ")),
                      len(lines))
    message, diff = lines[:first_diff], lines[first_diff:]
    while message and message[-1] == "":
        message.pop()
    if "" not in message:
        message.append("")         # no body: keep the blank line that ends the headers
    if message[-1] != "---":
        message.append("---")
    return "\n".join(message + diff).encode("utf-8")
