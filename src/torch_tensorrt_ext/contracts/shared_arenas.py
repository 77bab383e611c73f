"""The name of a program's record of the state arenas its methods share.

Invariant: `RECORD_KEY` is the one spelling, in Python, of the named-data key under which the
save (`executorch.saving.shared_arenas`) writes that record and under which the runtime loader
(`runtime/src/shared_arenas.cpp`), the Python loader (`executorch.running.program`) and
`inspect` (`executorch.inspecting.inspect_pte`) read it.
"""

RECORD_KEY = "tte.shared_state"
