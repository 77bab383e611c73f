"""Running: a saved `.pte` loaded into ExecuTorch's runtime with this project's delegate runtime
(`program.Program`), the runtime's log, the refusal of a call whose inputs do not fit, and
ExecuTorch's own LLM runner over such a program (`llm`).

Invariant: a program is read through `executorch.inspecting` (the file checks, the flatbuffer) and
run through `runtime_lib`; nothing here builds or writes a program (never imports `saving`).
"""
