"""Keep mutable state on the delegate's device: no host-to-device staging of buffers.

When a delegate names a device (`target_device` compile spec), ExecuTorch's PropagateDevicePass
stages every delegate argument through `et_copy._h2d_copy` — for a KV cache that is the whole
cache copied to the device on every call, and the engine then writes its in-place update into
the staging copy, not into the state (upstream gap 1). `StateOnDevicePass` runs just before
ExecuTorch's out-variant pass (where upstream PR #4667 puts its fix): it removes each staging
copy whose source is a mutable buffer and places that buffer itself on the device, so the
memory planner allocates the state in device memory and the engine is handed the caller's
buffer.

Invariant: only staging copies of the named mutable-buffer placeholders are removed; user inputs
keep theirs, and the buffer gets exactly the device its staging copy targeted.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult


class StateOnDevicePass(PassBase):
    def __init__(self, buffer_placeholders: Iterable[str], then: PassBase):
        super().__init__()
        self.names = set(buffer_placeholders)
        self.then = then

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        h2d = torch.ops.et_copy._h2d_copy.default
        changed = False
        for node in list(graph_module.graph.nodes):
            if node.op != "call_function" or node.target != h2d:
                continue
            src = node.args[0]
            if not (isinstance(src, torch.fx.Node) and src.op == "placeholder"
                    and src.name in self.names):
                continue
            staged, spec = node.meta.get("spec"), src.meta.get("spec")
            if staged is not None and spec is not None:
                spec.device = staged.device
                spec.device_index = getattr(staged, "device_index", 0)
            node.replace_all_uses_with(src)
            graph_module.graph.erase_node(node)
            changed = True
        if changed:
            graph_module.recompile()
        result = self.then(graph_module)
        return PassResult(result.graph_module if result else graph_module,
                          changed or bool(result and result.modified))
