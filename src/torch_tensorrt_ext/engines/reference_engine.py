"""The CPU reference engine: one partition → an ExecuTorch program run by ExecuTorch's kernels
(`tte::execute_engine`), behind the same engine interface as a TensorRT engine.

Invariant: `build_reference_engine` turns each partition torch-tensorrt's own partitioner hands
to `convert_module` into a `ReferenceEngineModule` with the same binding names as TensorRT's
(inputs: the partition's placeholders; outputs: `output<i>`, aliased outputs the graph does not
return appended, as TensorRT's interpreter does) and the same aliased I/O: a cache write is
aliased exactly when the converters would alias it (`kv_rules`: a KV-eligible
`slice_scatter`/`index_copy` into a partition input, not marked `_trt_no_kv_alias`). The module
records the copies its delegate makes where a TensorRT engine module does, in its
`tte_copy_back` attribute (`engine_module.COPY_BACK_ATTR`), so one protocol reads both
(`engine_module`).
Its C++ twin is `runtime/src/reference_engine.cpp`.
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import torch
from torch.fx import GraphModule, Node

from ..contracts import blob as blobfmt
from ..contracts.dtypes import dtype_name
from ..contracts.engine import AliasedIO
from ..contracts.engine_call import Signature
from ..contracts.plan import PlanError
from ..lowering.kv_rules import aliased_in_partition
from .dynamic_dims import PartitionDims, partition_dims
from .execute_op import OP as EXECUTE_ENGINE
from .linear_weights import linear_weights_transposed
from .payload import (bind_scalar_reads, byte_tensor, dense_constants, scalar_inputs_as_tensors,
                      to_executorch_program, use_kv_update_layers)
from .weights import held, mismatch, weights_as_inputs


class ReferenceEngineModule(torch.nn.Module):
    """A built reference engine, shaped like torch-tensorrt's `TorchTensorRTModule` for every
    caller that reads one (binding names, `aliased_io`, forward's return convention)."""

    engine_kind = "reference"
    copies_in_pytorch = True     # its kernel performs its recorded copies in PyTorch too

    def __init__(self, name: str, program, meta: blobfmt.BlobMetadata, n_graph_outputs: int,
                 scalars: tuple[tuple[int, torch.dtype], ...] = (), output_dims=(),
                 size_outputs: tuple[tuple[int, int, int], ...] = (),
                 weights: Sequence[torch.Tensor] = ()):
        super().__init__()
        self.name = name
        self.output_dims = tuple(output_dims)   # Signature.output_dims: dynamic outputs' sizes
        # (result position, input, dim): a result that is an input's size (a partition handing a
        # sequence length on), returned from the inputs' shapes, never a binding of the payload
        self.size_outputs = tuple(size_outputs)
        self.scalars = tuple(scalars)   # (input position, dtype): a symbolic scalar bound as 0-d
        self.engine = None
        # the payload program's bytes (a tensor over them, no second copy) and its weights
        # (`engines.weights.held`: views of snapshots the program's other engines share), each
        # a plain attribute: a constant of its own in the graph the engine is exported in
        self.program = program if isinstance(program, torch.Tensor) else byte_tensor(program)
        wrong = mismatch(name, meta.weights, weights)
        if wrong is not None:
            raise PlanError(wrong)
        self._meta = meta
        for i, w in enumerate(weights):
            setattr(self, f"weight{i}", w)
        self._signature: str | None = None
        self.n_graph_outputs = n_graph_outputs
        self.input_binding_names = list(meta.input_names)
        self.output_binding_names = list(meta.output_names)
        self.aliased_io = {a.output: (a.input, a.kind) for a in meta.aliased_io}

    @property
    def weights(self) -> list[torch.Tensor]:
        """The engine's weights, in its metadata's order."""
        return [getattr(self, f"weight{i}") for i in range(len(self._meta.weights))]

    def __deepcopy__(self, memo):
        """A copy that shares the program and weights: an engine's bytes are never written (as a
        TensorRT engine's serialized plan), and torch-tensorrt's exporter deep-copies the compiled
        module it saves — which held a second copy of every weight through the whole save."""
        for t in (self.program, *self.weights):
            memo[id(t)] = t
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items()})
        return new

    @property
    def signature(self) -> str:
        """The call's signature JSON, built once per change of the record (not per forward)."""
        if self._signature is None:
            self._signature = Signature(self.name, self._meta, self.output_dims).to_json()
        return self._signature

    @property
    def tte_copy_back(self) -> list[list[str]]:
        """[output, input] of each output this engine copies into its input after a call — the
        record a TensorRT engine module keeps under the same name (`COPY_BACK_ATTR`). The engine
        itself copies (one copy, in the buffer's own memory), in PyTorch and in the ExecuTorch
        delegate alike."""
        return [[c.output, c.input] for c in self._meta.copy_back]

    @tte_copy_back.setter
    def tte_copy_back(self, pairs: Sequence[Sequence[str]]) -> None:
        copies = tuple(blobfmt.CopyBack(o, i) for o, i in pairs)
        meta = dataclasses.replace(self._meta, copy_back=copies)
        blobfmt.validate(meta)
        self._meta, self._signature = meta, None

    def bind_buffers(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Name the caller-owned buffers its inputs carry (input binding -> FQN)."""
        buffers = tuple(blobfmt.BufferBinding(i, f) for i, f in pairs)
        self._meta = dataclasses.replace(self._meta, buffers=buffers)
        self._signature = None

    def set_output_tensors_as_unowned(self, enabled: bool) -> None:
        """Nothing to tune: outputs are always fresh tensors."""

    def setup_engine(self) -> None:
        """Nothing to set up: the payload runs on ExecuTorch's CPU kernels."""

    def tensor_inputs(self, inputs: Sequence[object]) -> list:
        """Inputs as bindings: a symbolic scalar (a TensorRT shape input) as a 0-d tensor."""
        inputs = list(inputs)
        for i, dtype in self.scalars:
            inputs[i] = torch.scalar_tensor(inputs[i], dtype=dtype)
        return inputs

    def forward(self, *inputs):
        outs = EXECUTE_ENGINE(self.tensor_inputs(inputs), self.program, self.weights,
                              self.signature)
        outs = list(outs[:self.n_graph_outputs - len(self.size_outputs)])
        for pos, i, d in self.size_outputs:     # ascending positions
            outs.insert(pos, inputs[i].shape[d])
        return outs[0] if len(outs) == 1 else tuple(outs)


def _bindings(phs: list[Node], outs: list[Node], out_names: list[str], dims: PartitionDims):
    """Every binding (dynamic dims -1, bounded by max_shape) and which input dimension sizes
    each dynamic output dimension."""
    bindings, sources = [], []
    for p in phs:
        shape, bound = dims.input_shapes(p.meta["val"], p.name)
        bindings.append(blobfmt.IOBinding(p.name, dtype_name(p.meta["val"].dtype), shape, True,
                                          bound))
    for o, name in zip(outs, out_names, strict=False):
        shape, bound, src = dims.output_shapes(o.meta["val"], name)
        bindings.append(blobfmt.IOBinding(name, dtype_name(o.meta["val"].dtype), shape, False,
                                          bound))
        if src:
            sources.append((name, tuple((d.dim, d.input, d.input_dim) for d in src)))
    return tuple(bindings), tuple(sources)


def graph_copy(gm: GraphModule) -> GraphModule:
    """A copy of `gm` whose graph and attributes the build may edit, sharing its tensors
    (parameters, buffers, tensor attributes): the build replaces tensors but never writes one,
    and a deep copy would hold a second copy of the partition's weights while it lowers them."""
    memo = {id(t): t for t in (*gm.parameters(), *gm.buffers())}
    memo.update((id(v), v) for m in gm.modules() for v in vars(m).values()
                if isinstance(v, torch.Tensor))
    return copy.deepcopy(gm, memo)


def build_reference_engine(submodule: GraphModule, inputs=None, *, settings=None, name: str = "",
                           engine_cache=None) -> ReferenceEngineModule:
    """One partition → one reference engine (an ExecuTorch program run by `tte::execute_engine`)."""
    sub = graph_copy(submodule)
    scalars = scalar_inputs_as_tensors(sub)
    graph = sub.graph
    phs = [n for n in graph.nodes if n.op == "placeholder"]
    dims = partition_dims(phs)
    if dims.first or scalars:   # exported (`to_executorch_program`): give it the facts
        bind_scalar_reads(sub, dims.first)
    index = {p: i for i, p in enumerate(phs)}
    out_node = graph.output_node()
    single = not isinstance(out_node.args[0], (tuple, list))
    outs: list[Node] = [out_node.args[0]] if single else list(out_node.args[0])
    n_graph = len(outs)
    size_outputs = tuple((k, *dims.input_dim_of(o.meta.get("val"), f"result {k}"))
                         for k, o in enumerate(outs)
                         if not isinstance(o.meta.get("val"), torch.Tensor))
    outs = [o for o in outs if isinstance(o.meta.get("val"), torch.Tensor)]
    order = {n: i for i, n in enumerate(graph.nodes)}
    kv = [n for n in graph.nodes if aliased_in_partition(n, index, order)]
    outs += [n for n in kv if n not in outs]      # aliased outputs TensorRT would append
    out_node.args = (tuple(outs),)
    out_names = [f"output{i}" for i in range(len(outs))]
    aliased = tuple(AliasedIO(out_names[outs.index(n)], n.args[0].name) for n in kv)
    bindings, output_dims = _bindings(phs, outs, out_names, dims)
    use_kv_update_layers(sub, [n.name for n in kv])   # lints and recompiles the edited graph
    dense_constants(sub)
    linear_weights_transposed(sub)        # stored transposed: no per-call permute_copy
    weights = weights_as_inputs(sub)      # the payload's trailing inputs, the program's named data
    program = to_executorch_program(sub, dims.export_spec(sub))
    meta = blobfmt.BlobMetadata(io_bindings=bindings, aliased_io=aliased,
                                engine_kind="reference", weights=tuple(r for r, _ in weights))
    blobfmt.validate(meta)
    return ReferenceEngineModule(name or "reference_engine", program, meta, n_graph, scalars,
                                 output_dims, size_outputs, held(weights))
