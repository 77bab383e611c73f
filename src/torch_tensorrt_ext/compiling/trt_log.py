"""TensorRT's warnings about a state input an engine does not read, kept for --verbose.

A buffer the program overwrites without reading it first (transformers' `cumulative_length`,
set from `cache_position` every call) is still lifted to an engine input: it is the input its
new value is written back into. TensorRT then warns twice per such buffer and engine ("Unused
Input: b_...", "[RemoveDeadLayers] Input Tensor b_... is unused or used only at compile-time,
but is not being removed.") — one pair per layer of a transformers model, telling the user
nothing they can act on.

Invariant: exactly those two messages, about a lifted buffer input (`b_` placeholder names),
are demoted to DEBUG on torch-tensorrt's TensorRT logger: shown when that logger is at DEBUG
(`torch_tensorrt.logging.set_level(logging.DEBUG)`), dropped otherwise. Every other record
passes untouched. `install()` is idempotent.
"""
from __future__ import annotations

import logging
import re

__all__ = ["install", "TRT_LOGGER_NAME"]

TRT_LOGGER_NAME = "torch_tensorrt [TensorRT Conversion Context]"
_UNUSED_STATE_INPUT = re.compile(
    r"(Unused Input: b_\S+|\[RemoveDeadLayers\] Input Tensor b_\S+ is unused or used only at "
    r"compile-time, but is not being removed\.)")


class _UnusedStateInputsAtDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or \
                not _UNUSED_STATE_INPUT.fullmatch(record.getMessage()):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def install() -> None:
    logger = logging.getLogger(TRT_LOGGER_NAME)
    if not any(isinstance(f, _UnusedStateInputsAtDebug) for f in logger.filters):
        logger.addFilter(_UnusedStateInputsAtDebug())
