"""The engine-call node contract: how a compiled engine appears in a graph.

    tte::execute_engine(Tensor[] inputs, Tensor engine, Tensor[] weights, str signature)
        -> Tensor[]

(this project's reference engines), or torch-tensorrt's `tensorrt::execute_engine` and its
serialized form `tensorrt::no_op_placeholder_for_execute_engine`. For `tte::execute_engine`,
`inputs` are the engine's input bindings in order, `engine` the payload program's bytes
(uint8), `weights` the engine's weights in the order its metadata lists them (`"weights"`, the
program's trailing inputs; CONTRACTS.md §2 "Weights") and `signature` a JSON object
`{"name": ..., "metadata": <blob metadata>}` (docs/CONTRACTS.md §1 keys) from which bindings,
shapes and dtypes are known without touching the payload. The op returns
every output binding in binding order.

Invariant: these predicates recognise an engine call in ATen or edge dialect by its schema name
alone, and a `Signature` is only ever built from metadata `blob.validate` accepts.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from collections.abc import Sequence

from torch.fx import Node

from . import blob, blob_metadata, blob_validate
from ..errors import UsageError

__all__ = ["SCHEMA", "INPUTS_ARG", "ENGINE_ARG", "WEIGHTS_ARG", "SIGNATURE_ARG", "TTE_OP",
           "TRT_OPS", "Signature", "schema_name", "is_engine_call", "is_reference_call",
           "is_tensorrt_call"]

SCHEMA = ("execute_engine(Tensor[] inputs, Tensor engine, Tensor[] weights, str signature) "
          "-> Tensor[]")
# the argument positions of a `tte::execute_engine` call
INPUTS_ARG, ENGINE_ARG, WEIGHTS_ARG, SIGNATURE_ARG = range(4)
TTE_OP = "tte::execute_engine"
TRT_OPS = ("tensorrt::execute_engine", "tensorrt::no_op_placeholder_for_execute_engine")


def schema_name(node: Node) -> str:
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    return schema.name if schema is not None else ""


def is_reference_call(node: Node) -> bool:
    return schema_name(node) == TTE_OP


def is_tensorrt_call(node: Node) -> bool:
    return schema_name(node) in TRT_OPS


def is_engine_call(node: Node) -> bool:
    """An engine call in ATen or edge dialect (whose ops are wrappers with the same schema)."""
    return is_tensorrt_call(node) or is_reference_call(node)


@dataclass(frozen=True)
class Signature:
    """The `signature` argument of a `tte::execute_engine` call: engine name + blob metadata,
    and for each output binding with dynamic (-1) dimensions which input dimension each is
    (`output_dims`: binding -> ((dim, input index, input dim), ...)), so a fake kernel shapes
    the outputs from the inputs alone."""

    name: str
    metadata: blob.BlobMetadata
    output_dims: tuple[tuple[str, tuple[tuple[int, int, int], ...]], ...] = ()

    def to_json(self) -> str:
        obj = {"name": self.name, "metadata": self.metadata.to_json_dict()}
        if self.output_dims:
            obj["output_dims"] = {n: [list(d) for d in dims] for n, dims in self.output_dims}
        return json.dumps(obj, separators=(",", ":"), sort_keys=False)

    def output_shape(self, b: blob.IOBinding, input_shapes: Sequence[Sequence]) -> list:
        """Output binding `b`'s shape for inputs of `input_shapes` (sizes may be symbolic)."""
        shape = list(b.shape)
        for k, i, d in dict(self.output_dims).get(b.name, ()):
            shape[k] = input_shapes[i][d]
        if any(isinstance(s, int) and s < 0 for s in shape):
            raise UsageError(f"engine {self.name!r}: output {b.name!r} has shape {list(b.shape)} "
                             "and its signature does not say which input dimensions size it")
        return shape

    @staticmethod
    @functools.lru_cache(maxsize=256)
    def parse(text: str) -> Signature:
        obj = json.loads(text)
        raw = json.dumps(obj["metadata"]).encode()
        meta = blob_metadata.parse_metadata(blob.MAGIC_TR03, raw)
        blob_validate.validate(meta)
        dims = tuple((n, tuple(tuple(int(x) for x in d) for d in lst))
                     for n, lst in obj.get("output_dims", {}).items())
        return Signature(obj["name"], meta, dims)
