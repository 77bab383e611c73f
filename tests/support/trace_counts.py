"""Counting torch's functionalization: a test sees which programs `run_decompositions` ran on."""
from __future__ import annotations


import torch


def count_decompositions(monkeypatch) -> list[torch.export.ExportedProgram]:
    """From now on (for the test), every `ExportedProgram.run_decompositions` call appends the
    program it ran on to the returned list."""
    calls: list[torch.export.ExportedProgram] = []
    real = torch.export.ExportedProgram.run_decompositions

    def counted(self, *a, **k):
        calls.append(self)
        return real(self, *a, **k)
    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    return calls
