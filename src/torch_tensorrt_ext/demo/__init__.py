"""Embedded example models for the CLI's main job (`plan --example`, `demo`).

Invariant: the examples are plain `nn.Module`s with no external weights or data; building one
is deterministic for a given seed.
"""
