"""ExecuTorch's export recipes for TensorRT: importing this module registers a provider in
ExecuTorch's `recipe_registry`, so ExecuTorch's own export API takes TensorRT recipes —

    with tte.reference.engines():      # or none: TensorRT / TensorRT-RTX engines
        session = executorch.export.export(model, [example_args],
                                           export_recipe=ExportRecipe.get_recipe(
                                               TensorRTRecipeType.FP16))
    session.save_pte_file("model.pte")

Invariant: a recipe's pipeline is `torch_tensorrt.save(..., output_format="executorch")`'s, staged
as ExecuTorch's: each method, exported by ExecuTorch (its `dynamic_shapes` too), is compiled by the
patched `torch_tensorrt.compile` with the engine kind in force when the recipe was made, every
buffer write declared (KV caches aliased, copy-back state copied once); torch-tensorrt's
ExecuTorch preparation, partitioner and edge config lower it, and `to_executorch` runs with the
stateful backend config and its checks (`saving.config.stateful_edge`). The precision is the
model's dtype: FP16 / BF16 cast the *module* before torch.export — ExecuTorch's source-transform
stage, on its copy of the model, as eager's `model.to(dtype)` — and its floating inputs on entry,
so the exported program is the cast module's own (a `.float()` in the model stays a cast, its
dtypes hold); the `.pte` takes floating inputs in that dtype. A precision the engine kind cannot
build is refused when the recipe is made, naming the recipe and the engine kind.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from executorch.export import (AOQuantizationConfig, BackendRecipeProvider, ExportRecipe,
                               LoweringRecipe, QuantizationRecipe, RecipeType, recipe_registry)
from torch.export import ExportedProgram
from torchao.core.config import AOBaseConfig
from torchao.quantization.transform_module import register_quantize_module_handler

from .errors import UsageError
from .upstream_api import torch_tensorrt_module

__all__ = ["DTYPES", "TensorRTRecipeProvider", "TensorRTRecipeType", "engine_kind_in_force"]

BACKEND = "tensorrt"


class TensorRTRecipeType(RecipeType):
    """The precisions a TensorRT recipe builds engines in."""

    FP32 = "tensorrt_fp32"
    FP16 = "tensorrt_fp16"
    BF16 = "tensorrt_bf16"

    @classmethod
    def get_backend_name(cls) -> str:
        return BACKEND


DTYPES = {TensorRTRecipeType.FP32: torch.float32, TensorRTRecipeType.FP16: torch.float16,
          TensorRTRecipeType.BF16: torch.bfloat16}
BF16_CAPABILITY = (8, 0)   # TensorRT builds bfloat16 engines for Ampere (sm80) and later


class UnsupportedRecipe(UsageError):
    """A recipe the engine kind in force cannot build; names both."""


def engine_kind_in_force() -> str:
    """"reference" inside `tte.reference.engines()`, else the SDK torch-tensorrt builds with:
    "tensorrt_rtx" (torch-tensorrt-rtx) or "tensorrt"."""
    from .seams.engine_kind import engine_kind
    if engine_kind() == "reference":
        return "reference"
    rtx = torch_tensorrt_module().ENABLED_FEATURES.tensorrt_rtx
    return "tensorrt_rtx" if rtx else "tensorrt"


def supported(kind: str) -> tuple[list[TensorRTRecipeType], str]:
    """The recipes `kind`'s engines honour, and the engines described for a message: CPU
    reference engines every precision; TensorRT / TensorRT-RTX engines bfloat16 only for a
    target of compute capability 8.0 or later (the device's, else `seams.device`'s target)."""
    if kind == "reference":
        return list(TensorRTRecipeType), "'reference' engines"
    from .seams.device import target_capability
    cc = target_capability()
    recipes = [r for r in TensorRTRecipeType
               if r is not TensorRTRecipeType.BF16 or cc >= BF16_CAPABILITY]
    return recipes, f"{kind!r} engines for compute capability {cc[0]}.{cc[1]}"


class TensorRTRecipeProvider(BackendRecipeProvider):
    """ExecuTorch's `BackendRecipeProvider` for TensorRT (`TensorRTRecipeType`)."""

    @property
    def backend_name(self) -> str:
        return BACKEND

    def get_supported_recipes(self):
        return list(TensorRTRecipeType)

    def create_recipe(self, recipe_type: RecipeType, **kwargs: Any) -> ExportRecipe | None:
        """The recipe for `recipe_type` with the engine kind in force now; kwargs: `strict`
        (torch.export's mode; True by default, as ExecuTorch's own recipes: a non-strict trace of a
        module that writes its buffers through another object holding them writes the module's
        real buffers, and the program starts from those values) and any `torch_tensorrt.compile`
        setting."""
        if recipe_type not in DTYPES:
            return None
        kind = engine_kind_in_force()
        recipes, engines = supported(kind)
        if recipe_type not in recipes:
            raise UnsupportedRecipe(
                f"recipe {recipe_type.value!r} needs {DTYPES[recipe_type]} engines, which "
                f"{engines} do not build; they take {[r.value for r in recipes]}")
        strict = bool(kwargs.pop("strict", True))
        compile_one = _compile_method(kind, DTYPES[recipe_type], kwargs)
        return ExportRecipe(
            name=recipe_type.value, strict=strict, aten_transform_passes=[compile_one],
            quantization_recipe=_cast_source(DTYPES[recipe_type]),
            lowering_recipe=LoweringRecipe(
                partitioners=[_partitioner()], edge_compile_config=_edge_config(),
                edge_manager_transform_passes=[_stateful]))


def _partitioner():
    from torch_tensorrt.executorch import TensorRTPartitioner
    return TensorRTPartitioner()


def _edge_config():
    from torch_tensorrt.executorch import get_edge_compile_config
    return get_edge_compile_config()


def _stateful(edge_manager) -> list:
    """ExecuTorch's hook after lowering, used to make its `to_executorch` the stateful one (the
    manager's class changes in place; no pass is returned)."""
    from .executorch.saving.config import stateful_edge
    stateful_edge(edge_manager)
    return []


def _engines(kind: str):
    from .seams.engine_kind import reference_engines
    return reference_engines() if kind == "reference" else contextlib.nullcontext()


def _compile_method(kind: str, dtype: torch.dtype, settings: dict
                    ) -> Callable[[str, ExportedProgram], ExportedProgram]:
    """ExecuTorch's aten pass for one method: its exported program compiled and declared as
    `torch_tensorrt.save` declares it, prepared as torch-tensorrt's ExecuTorch export prepares
    a program for lowering."""
    def compile_method(method: str, ep: ExportedProgram) -> ExportedProgram:
        torch_tensorrt = torch_tensorrt_module()
        ep, args = _in_precision(ep, dtype)
        with _engines(kind):
            gm = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(args),
                                        **{"min_block_size": 1, **settings})
        return _for_lowering(_declared(gm, args))
    return compile_method


def _user_args(ep: ExportedProgram) -> tuple:
    return tuple(torch.utils._pytree.tree_leaves(ep.example_inputs))


def _dims(gm: torch.fx.GraphModule):
    from .engines.dynamic_dims import partition_dims
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return partition_dims(inputs).export_spec(gm)


@dataclass(frozen=True)
class InPrecision(AOBaseConfig):
    """The source transform of a half-precision recipe: the model in `dtype` (torchao's
    `quantize_` applies it to the root module only, through ExecuTorch's source-transform stage)."""

    dtype: torch.dtype


def _root_only(module: torch.nn.Module, fqn: str) -> bool:
    return fqn == ""


def _cast_source(dtype: torch.dtype) -> QuantizationRecipe | None:
    """ExecuTorch's source transform casting the model to `dtype` before torch.export; none for
    float32 (the model as given)."""
    if dtype == torch.float32:
        return None
    return QuantizationRecipe(ao_quantization_configs=[
        AOQuantizationConfig(InPrecision(dtype), filter_fn=_root_only)])


@register_quantize_module_handler(InPrecision)
def _cast_module(module: torch.nn.Module, config: InPrecision) -> torch.nn.Module:
    """`module` (ExecuTorch's copy) as eager's `module.to(dtype)`, its floating inputs cast to
    `dtype` on entry; once per module (a dict of methods may name one model twice)."""
    if getattr(module, "_tte_precision", None) != config.dtype:
        module.to(config.dtype)
        module.register_forward_pre_hook(functools.partial(_cast_inputs, dtype=config.dtype),
                                         with_kwargs=True)
        module._tte_precision = config.dtype
    return module


def _cast_inputs(module, args, kwargs, dtype: torch.dtype):
    def cast(a):
        return a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
    return torch.utils._pytree.tree_map(cast, (args, kwargs))


def _in_precision(ep: ExportedProgram, dtype: torch.dtype) -> tuple[ExportedProgram, tuple]:
    """`ep`, the cast module's program, taking its floating inputs in `dtype`: the entry casts
    `_cast_inputs` traced (and their dtype assertions on the caller's example inputs) dropped,
    re-exported with its own dynamic dimensions; as it is for float32."""
    args = _user_args(ep)
    if dtype == torch.float32:
        return ep, args
    cast = tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in args)
    module = ep.module()   # its placeholders are the user inputs, as `_dims` reads them
    _drop_entry_casts(module.graph, dtype)
    module.recompile()
    dims = _dims(module)
    return torch.export.export(module, cast, dynamic_shapes=dims, strict=False), cast


ENTRY_CASTS = (torch.ops.aten.to.dtype, torch.ops.aten._to_copy.default)


def _drop_entry_casts(graph: torch.fx.Graph, dtype: torch.dtype) -> None:
    """Every floating user input read directly, as `_cast_inputs` leaves it: its cast to `dtype`
    replaced by the input itself, its dtype assertion dropped (the input arrives in `dtype`)."""
    for node in graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if not (isinstance(val, torch.Tensor) and val.is_floating_point()):
            continue
        for user in list(node.users):
            if user.target is torch.ops.aten._assert_tensor_metadata.default:
                graph.erase_node(user)
            elif user.target in ENTRY_CASTS and _cast_dtype(user) == dtype:
                user.replace_all_uses_with(node)
                graph.erase_node(user)


def _cast_dtype(node: torch.fx.Node):
    return node.kwargs.get("dtype", node.args[1] if len(node.args) > 1 else None)


def _declared(gm: torch.fx.GraphModule, args: tuple) -> ExportedProgram:
    """The compiled module as `torch_tensorrt.save` exports it: every mutation declared."""
    from .seams.save_declaration import declare_program
    torch_tensorrt = torch_tensorrt_module()
    return declare_program(torch_tensorrt.dynamo.export(gm, arg_inputs=list(args),
                                                        dynamic_shapes=_dims(gm)))


def _for_lowering(ep: ExportedProgram) -> ExportedProgram:
    """What torch-tensorrt's `executorch.export` hands ExecuTorch's lowering for one program:
    staged by the same function export stages each method with (`stage_for_lowering`, which the
    patch series adds: engine calls validated and rewritten, aliased KV and copy-back writes
    declared), then values on the host and copy-backs handed to the delegates."""
    from torch_tensorrt.executorch._export import stage_for_lowering

    from .executorch.saving.prepare import prepare_programs
    copyback = ep.graph_module.meta.get("_copyback_mutation_buffers", []) or []
    return prepare_programs(stage_for_lowering(ep, copyback_buffers=copyback))


recipe_registry.register_backend_recipe_provider(TensorRTRecipeProvider())
