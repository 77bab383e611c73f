"""The compile stage's own work, below the seams that call it (`seams.compile`): planning and
lifting a program's writes (`planned_lift`), the engines a compile built as records
(`engine_records`), the compiled module's final form (`module_form`, `module_state`), the check
that the module performs every write (`carried_writes`) and TensorRT's log filter (`trt_log`).

Invariant: no patch of `patches/` imports a module here — the patch series calls `seams/`,
which hands over to these; they import only the layers below them (`contracts`, `lowering`,
`engines`).
"""
