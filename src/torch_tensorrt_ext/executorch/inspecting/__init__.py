"""Inspecting: what a saved `.pte` holds, read from its bytes alone — the file checks
(`pte_check`), its state traffic (`traffic`), the `inspect` report (`inspect_pte`) and the
verifier of its state writes by value (`verify_writes`).

Invariant: reads a program, never changes or runs one; imports neither `saving` nor `running`
(both read programs through it).
"""
