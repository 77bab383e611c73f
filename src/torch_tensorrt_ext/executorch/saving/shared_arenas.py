"""One allocation per mutable buffer across the methods of a program whose state lives in device
memory, where ExecuTorch 1.5.1 cannot share it.

ExecuTorch shares mutable buffers between methods (`MemoryPlanningPass(share_mutable_buffers=
True)`) only when every tensor is planned in its default arena (mem_id 1): it places the state in
mem_id 2 and its `Module(share_memory_arenas=True)` hands every method the same mem_id 1 and 2.
A program with device delegates plans device arenas too, and both sides refuse. This planner
does what ExecuTorch's does, per device: it plans each method's other tensors as ExecuTorch would
(per device arenas), then every buffer some method mutates — where any method uses it — and every
buffer no method mutates that an engine on the device reads (`live`: engines read buffers live,
so such a buffer is device memory initialised once per load, not staged across the link per call)
in one arena per device that holds nothing else, at one offset in every method.

Invariant: the record under `RECORD_KEY` in the program's named data is the one statement of the
layout — each arena's device, size and buffer offsets, and each method's planned-buffer index of
it; the runtime loader (`runtime/src/shared_arenas.cpp`) allocates each arena once from it and
hands it to every method, and checks each buffer lands where the record says. A buffer whose
methods place it on different devices cannot be one allocation: it keeps one per method, named in
a warning, never silently — and the save's whole-program check (`inspecting.program_state`) then
refuses the program, the buffer being held apart.
"""
from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Mapping

import torch
from ...contracts.shared_arenas import RECORD_KEY
from ...contracts.target_device import parse_target_device
from ...errors import UsageError

RECORD_VERSION = 1

_Device = tuple[int, int]          # (exir DeviceType value, index)


def parse_device(text: str) -> _Device:
    """`"cuda:0"` (a `target_device` compile spec) -> (exir DeviceType value, index)."""
    from executorch.exir.schema import DeviceType

    kind, index = parse_target_device(text)
    return int(DeviceType[kind.upper()]), index or 0


def _device_name(device: _Device) -> str:
    from executorch.exir.schema import DeviceType

    kind, index = device
    return "cpu" if kind == DeviceType.CPU else f"{DeviceType(kind).name.lower()}:{index}"


class _Layout:
    """What every method's planner saw (each buffer's specs per method), then the arenas."""

    def __init__(self, planner, store, methods: list[str], live: set[str]):
        self.planner = copy.copy(planner)
        self.planner.alloc_mutable_buffers = False    # the state is planned here, across methods
        self.planner.share_mutable_buffers = False
        self.store = store
        self.methods = list(methods)
        self.uses: dict[str, dict[str, list]] = {}     # fqn -> method -> [spec]
        self.mutated: set = set(live)     # state: what a method mutates, and live reads
        self.modules: dict[str, torch.fx.GraphModule] = {}
        self.record: dict | None = None

    def collect(self, method: str, gm: torch.fx.GraphModule, signature) -> None:
        mutated = set(signature.buffers_to_mutate.values())
        for node in gm.graph.nodes:
            if node.op != "placeholder" or node.target not in signature.inputs_to_buffers:
                continue
            fqn = signature.inputs_to_buffers[node.target]
            spec = node.meta.get("spec")
            if spec is None:
                continue
            if getattr(spec, "mem_id", None) is not None:
                raise UsageError(f"method {method!r}: buffer {fqn!r} was planned before the "
                                 "cross-method state planner (mem_id set): cannot share it")
            self.uses.setdefault(fqn, {}).setdefault(method, []).append(spec)
            if fqn in mutated:
                self.mutated.add(fqn)
        self.modules[method] = gm

    def plan(self) -> None:
        if self.record is not None:
            return
        arenas: dict[_Device, dict] = {}
        placed: dict[str, _Device] = {}               # fqn -> the device arena holding it
        unshared: dict[str, dict[str, str]] = {}
        for fqn in sorted(self.mutated):
            devices = {m: {self._where(s) for s in specs}
                       for m, specs in self.uses[fqn].items()}
            every = set().union(*devices.values())
            if len(every) > 1:
                unshared[fqn] = {m: ", ".join(_device_name(d) for d in sorted(ds))
                                 for m, ds in sorted(devices.items())}
                self._own_copy_per_method(fqn)
                continue
            device = every.pop()
            arena = arenas.setdefault(device, {"device": _device_name(device), "bytes": 0,
                                               "buffers": {}})
            specs = [s for ss in self.uses[fqn].values() for s in ss]
            size = max(s.realign(self.planner.alignment) for s in specs)
            arena["buffers"][fqn] = arena["bytes"]
            for spec in specs:
                spec.mem_offset = arena["bytes"]
            placed[fqn] = device
            arena["bytes"] += size
        order = sorted(arenas)
        index: dict[str, list[int]] = {}
        for method in self.methods:
            gm = self.modules[method]
            sizes = gm.meta["non_const_buffer_sizes"]
            index[method] = []
            for device in order:
                # the runtime's planned-buffer index (MethodMeta, HierarchicalAllocator) is the
                # mem_id less one: mem_id 0 is ExecuTorch's reserved slot
                index[method].append(len(sizes) - 1)
                self._append_buffer(gm, device, arenas[device]["bytes"])
            for fqn, device in placed.items():
                for spec in self.uses[fqn].get(method, ()):
                    spec.mem_id = index[method][order.index(device)] + 1
        self.record = {"version": RECORD_VERSION, "arenas": [arenas[d] for d in order],
                       "methods": index}
        self.store.add_named_data(RECORD_KEY, json.dumps(self.record, sort_keys=True).encode())
        if unshared:
            warnings.warn(
                "buffers placed on different devices by different methods cannot share one "
                "allocation; each method keeps its own copy of them: " + "; ".join(
                    f"{f!r} ({', '.join(f'{m}: {d}' for m, d in ms.items())})"
                    for f, ms in sorted(unshared.items())), UserWarning, stacklevel=2)

    def _own_copy_per_method(self, fqn: str) -> None:
        """Plan `fqn` in each method's own arena for its device (not shared): after the arena
        list, a buffer of its own per method and use."""
        for method, specs in self.uses[fqn].items():
            gm = self.modules[method]
            for spec in specs:
                spec.mem_id = len(gm.meta["non_const_buffer_sizes"])
                spec.mem_offset = 0
                self._append_buffer(gm, self._where(spec), spec.realign(self.planner.alignment))

    def _where(self, spec) -> _Device:
        """The arena a spec's memory comes from: its device, or the host when ExecuTorch plans
        every tensor in host memory (`enable_non_cpu_memory_planning=False`)."""
        from executorch.exir.schema import DeviceType

        if not self.planner.enable_non_cpu_memory_planning:
            return int(DeviceType.CPU), 0
        return int(spec.device), int(spec.device_index)

    @staticmethod
    def _append_buffer(gm: torch.fx.GraphModule, device: _Device, size: int) -> None:
        from executorch.exir.schema import DeviceType, NonConstBufferDevice

        index = len(gm.meta["non_const_buffer_sizes"])
        gm.meta["non_const_buffer_sizes"].append(size)
        if device[0] != DeviceType.CPU:
            gm.meta.setdefault("non_const_buffer_device", []).append(
                NonConstBufferDevice(buffer_idx=index, device_type=DeviceType(device[0]),
                                     device_index=device[1]))


class _MethodPlanner:
    """ExecuTorch's per-method planner slot (`ExecutorchBackendConfig.memory_planning_pass` as
    `{method: planner}`): plans the method's other tensors, then the shared layout once."""

    def __init__(self, layout: _Layout, method: str):
        self.layout = layout
        self.method = method

    @property
    def enable_non_cpu_memory_planning(self) -> bool:
        return self.layout.planner.enable_non_cpu_memory_planning

    @enable_non_cpu_memory_planning.setter
    def enable_non_cpu_memory_planning(self, value: bool) -> None:
        self.layout.planner.enable_non_cpu_memory_planning = value

    def run(self, graph_module, graph_signature=None):
        if graph_signature is None:
            raise UsageError(f"method {self.method!r}: the cross-method state planner needs "
                             "the graph signature")
        result = self.layout.planner.run(graph_module, graph_signature)
        self.layout.collect(self.method, graph_module, graph_signature)
        return result

    def run_multimethod(self) -> None:
        self.layout.plan()


def planners(planner, store, methods, live=frozenset()) -> Mapping[str, _MethodPlanner]:
    """`{method: planner}` sharing each mutable buffer — and each buffer `live` names, which no
    method mutates but an engine on a device reads — across `methods` as one allocation per
    device; `planner` (a MemoryPlanningPass, not changed) plans everything else; the layout is
    recorded in `store` (the edge manager's NamedDataStore) when the last method is planned."""
    layout = _Layout(planner, store, methods, set(live))
    return {m: _MethodPlanner(layout, m) for m in layout.methods}

