"""torch-tensorrt's legacy exporter (`create_trt_exp_program`) and module-state writes.

Invariant: before the legacy exporter builds its program, every `aten.copy_(buffer, value)` the
compiled module ends with becomes a graph output tagged with the buffer's FQN in the exporter's
own mutation-target key, so the exporter declares it a BUFFER_MUTATION of that buffer; no
in-place op reaches the program. The graph computes the same values; only where the write is
recorded changes.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule
from ..errors import UsageError

# the key torch-tensorrt 2.14.0's create_trt_exp_program reads on output nodes
UPSTREAM_MUTATION_TARGET = "_kv_mutation_target"


def copies_to_mutation_outputs(gm: GraphModule) -> None:
    graph = gm.graph
    buffers = dict(gm.named_buffers())
    out = graph.output_node()
    outs = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    added = []
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.copy_.default:
            continue
        dst, value = node.args[0], node.args[1]
        if node.users or getattr(dst, "op", None) != "get_attr" or dst.target not in buffers:
            continue
        if UPSTREAM_MUTATION_TARGET in value.meta:
            raise UsageError(f"{value.name} is written into two buffers "
                             f"({value.meta[UPSTREAM_MUTATION_TARGET]!r} and {dst.target!r})")
        value.meta[UPSTREAM_MUTATION_TARGET] = str(dst.target)
        graph.erase_node(node)
        added.append(value)
    if added:
        out.args = (tuple(added + outs),)  # the verifier wants mutations first
        graph.lint()
        gm.recompile()
