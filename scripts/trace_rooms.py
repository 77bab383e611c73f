"""Where the compiled graph goes: follow `trt_gm` from `StatefulCompile.finish` through compile
and the `.pte` save (`tte.reference.export`: `torch_tensorrt.save(output_format="executorch")`)
and print the rooms (the package's folders) it stays in, in order.

A *stay* is a run of consecutive calls, in one room, of functions of this package that are handed
the graph (an argument that is the GraphModule `finish` received, or its `Graph`); a *return* is a
stay in a room the graph had already left.

Usage: python scripts/trace_rooms.py   (the demo decoder, reference engines; prints one summary)
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.demo.models import Decoder

PKG = Path(tte.__file__).parent


def _room(filename: str) -> str | None:
    path = Path(filename)
    if PKG not in path.parents:
        return None
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _traced(seam) -> list[tuple[str, str]]:
    """[(room, function)] for each call of a package function handed the graph, in call order."""
    calls, held = [], []
    real = seam.StatefulCompile.finish

    def profile(frame, event, _arg):
        if event != "call" or not held:
            return
        room = _room(frame.f_code.co_filename)
        if room is None:
            return
        code = frame.f_code
        args = [frame.f_locals.get(n) for n in code.co_varnames[:code.co_argcount
                                                               + code.co_kwonlyargcount]]
        if any(a is held[0] or a is held[0].graph for a in args):
            calls.append((room, code.co_name))

    def finish(self, trt_gm, rebuild=None):
        if not held:
            held.append(trt_gm)
            sys.setprofile(profile)
        return real(self, trt_gm, rebuild)

    seam.StatefulCompile.finish = finish
    try:
        model = Decoder(layers=2).eval()
        with tempfile.TemporaryDirectory() as tmp:
            tte.reference.export(model, model.example_args(), str(Path(tmp) / "decoder.pte"))
    finally:
        sys.setprofile(None)
        seam.StatefulCompile.finish = real
    return calls


def main() -> int:
    from torch_tensorrt_ext.compiling import stateful_compile as seam
    torch.manual_seed(0)
    calls = _traced(seam)
    stays, left, returns = [], set(), []
    for room, fn in calls:
        if stays and stays[-1][0] == room:
            stays[-1][1].append(fn)
            continue
        if stays:
            left.add(stays[-1][0])
        if room in left:
            returns.append(room)
        stays.append((room, [fn]))
    for room, fns in stays:
        print(f"{room:12s} {', '.join(dict.fromkeys(fns))}")
    rooms = len({r for r, _ in stays})
    print(f"{len(stays)} stays in {rooms} rooms, {len(returns)} returns to a room already left "
          f"({', '.join(returns) or 'none'}); {len(calls)} calls handed the graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
