"""The compile stage: what a patched `torch_tensorrt.dynamo.compile` runs between torch.export
and the compiled module — the program it lowers and the compile itself (`stateful_compile`),
planning and lifting a program's writes (`planned_lift`), the engines a compile built as records
(`engine_records`), the compiled module's final form (`module_form`, `module_state`), the check
that the module performs every write (`carried_writes`), the partitioner's fixes (an aliased
output a partition returns, `partition_outputs`; a partition whose only effect is an aliased cache
write left to PyTorch, `write_only_partitions`) and TensorRT's log filter (`trt_log`).

Invariant: no patch of `patches/` imports a module here — the patch series calls
`seams.compile_hooks`, which names these; they import only the layers below them (`contracts`,
`lowering`, `engines`).
"""
