"""The patched upstream API, imported for this package's own conveniences (demo, `tte.reference`).

Invariant: `torch_tensorrt_module()` returns the installed torch_tensorrt only when this
project's series is applied (else `UpstreamUnavailable` says what to run), imported without the
third-party noise a user cannot act on (device probes printed by C++ libraries at import);
`quiet()` hides warnings and log lines of that kind for the duration of a block.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

from .errors import TteError


class UpstreamUnavailable(TteError, RuntimeError):
    """torch_tensorrt cannot be used here (not installed, not importable, or unpatched)."""


@contextlib.contextmanager
def _quiet_fd2() -> Iterator[None]:
    """Hide what C++ libraries print to stderr while torch_tensorrt imports (device probes)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*meaningless initial state.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*was assigned during export.*")
        levels = {}
        for name in ("torch_tensorrt", "torch.utils._pytree", "torch._library", "torch._export",
                     "torch.export", "torch._opaque_base"):
            logger = logging.getLogger(name)
            levels[name] = logger.level
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


def torch_tensorrt_module():
    """The installed torch_tensorrt with this project's series applied, imported quietly."""
    with quiet(), _quiet_fd2():
        try:
            import torch_tensorrt
        except Exception as e:  # noqa: BLE001 - reported to the user
            raise UpstreamUnavailable(
                f"torch_tensorrt does not import: {type(e).__name__}: {e}") from e
    from torch_tensorrt.dynamo import _compiler
    if "torch_tensorrt_ext.seams" not in open(_compiler.__file__).read():
        raise UpstreamUnavailable("torch_tensorrt is installed without this project's patch "
                                "series; run `torch-tensorrt-ext patch apply`")
    return torch_tensorrt


