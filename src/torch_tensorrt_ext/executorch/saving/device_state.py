"""Keep mutable state on the delegate's device: no host-to-device staging of buffers.

When a delegate names a device (`target_device` compile spec), ExecuTorch's PropagateDevicePass
stages every delegate argument through `et_copy._h2d_copy` — for a KV cache that is the whole
cache copied to the device on every call, and the engine then writes its in-place update into
the staging copy, not into the state (upstream gap 1). `StateOnDevicePass` runs just before
ExecuTorch's out-variant pass (where upstream PR #4667 puts its fix): it removes each staging
copy whose source is a mutable buffer and places that buffer itself on the device, so the
memory planner allocates the state in device memory and the engine is handed the caller's
buffer.

A buffer several methods share (`shared_arenas`) is one allocation, so it lives on the device in
every method, also in one where host kernels read or write it (a prefill whose T-position write
runs in PyTorch): there each host reader reads a device-to-host copy of it (`_d2h_copy`) and the
write-back `copy_` becomes a host-to-device copy into it (`_h2d_copy.out`, out= the buffer).

Invariant: only staging copies of the named mutable-buffer placeholders are removed; user inputs
keep theirs, and the buffer gets exactly the device its staging copy targeted (a resident buffer:
the device it is resident on). No host kernel is left reading or writing a buffer placed on the
device: a resident buffer's host readers read a staged copy, and its write-back crosses the link.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult


class StateOnDevicePass(PassBase):
    """`buffer_placeholders`: buffers an engine writes in place (staging removed); `resident`:
    placeholder name -> (exir DeviceType, index) of a buffer that lives on that device in every
    method (shared across methods), whoever reads and writes it here."""

    def __init__(self, buffer_placeholders: Iterable[str], then: PassBase,
                 resident: Mapping[str, tuple[int, int]] | None = None):
        super().__init__()
        self.names = set(buffer_placeholders)
        self.resident = dict(resident or {})
        self.then = then

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        h2d = torch.ops.et_copy._h2d_copy.default
        changed = False
        for node in list(graph_module.graph.nodes):
            if node.op != "call_function" or node.target != h2d:
                continue
            src = node.args[0]
            staged = node.meta.get("spec")
            if staged is not None and staged.const:
                # a staged copy of a read-only buffer is computed each call, not serialized:
                # ExecuTorch's PropagateDevicePass clones the constant's spec, const flag and all,
                # and its emitter then fails looking for the copy's data ("'NoneType' object
                # has no attribute 'nbytes'")
                staged.const = False
                changed = True
            if not (isinstance(src, torch.fx.Node) and src.op == "placeholder"
                    and (src.name in self.names or src.name in self.resident)):
                continue
            staged, spec = node.meta.get("spec"), src.meta.get("spec")
            if staged is not None and spec is not None:
                spec.device = staged.device
                spec.device_index = getattr(staged, "device_index", 0)
            node.replace_all_uses_with(src)
            graph_module.graph.erase_node(node)
            changed = True
        write_backs = []
        for node in list(graph_module.graph.nodes):
            if node.op == "placeholder" and node.name in self.resident:
                write_backs += _reside(graph_module, node, self.resident[node.name])
                changed = True
        if changed:
            graph_module.recompile()
        result = self.then(graph_module)
        gm = result.graph_module if result else graph_module
        for write_back in write_backs:
            _write_back_across_the_link(gm, write_back)
        if write_backs:
            gm.recompile()
        return PassResult(gm, changed or bool(result and result.modified))


def _is_write_back(node: torch.fx.Node, buffer: torch.fx.Node) -> bool:
    return (node.op == "call_function" and node.target is torch.ops.aten.copy_.default
            and node.args[0] is buffer)


def _reside(gm: torch.fx.GraphModule, buffer: torch.fx.Node, device: tuple[int, int]) -> list:
    """Place `buffer` on `device`; its host readers read one device-to-host copy of it. Returns
    its write-back copies (rewritten once the out-variant pass has run)."""
    from executorch.exir import schema
    from executorch.exir.delegate import executorch_call_delegate

    spec = buffer.meta["spec"]
    spec.device, spec.device_index = schema.DeviceType(device[0]), device[1]
    write_backs = [u for u in buffer.users if _is_write_back(u, buffer)]
    readers = [u for u in buffer.users if u.op != "output" and u not in write_backs
               and u.target is not executorch_call_delegate]
    if readers:
        order = {n: k for k, n in enumerate(gm.graph.nodes)}
        first = min(readers, key=order.__getitem__)
        with gm.graph.inserting_before(first):
            staged = gm.graph.call_function(torch.ops.et_copy._d2h_copy.default, (buffer,))
        staged.meta.update({k: v for k, v in buffer.meta.items() if k != "spec"})
        host = copy.copy(spec)
        host.init_mem_planning_fields()
        host.device, host.device_index, host.const = schema.DeviceType.CPU, 0, False
        staged.meta["spec"] = host
        for u in readers:
            u.replace_input_with(buffer, staged)
    return write_backs


def _write_back_across_the_link(gm: torch.fx.GraphModule, write_back: torch.fx.Node) -> None:
    """`copy_(buffer, value)` (a host kernel) -> `_h2d_copy.out(value, out=buffer)`."""
    buffer, value = write_back.args[0], write_back.args[1]
    with gm.graph.inserting_before(write_back):
        h2d = gm.graph.call_function(torch.ops.et_copy._h2d_copy.out, (value,), {"out": buffer})
    h2d.meta.update(write_back.meta)
    h2d.meta["spec"] = buffer.meta["spec"]
    write_back.replace_all_uses_with(h2d)
    gm.graph.erase_node(write_back)
