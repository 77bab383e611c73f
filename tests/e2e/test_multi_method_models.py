"""Real models of several methods (transformers, tiny configs, random init): each method exported
as its authors export it, saved as one program on the multi-method save paths, and stepped against
eager across interleaved calls of every method — state by FQN after every call.

Whisper: transformers' encoder and its static-cache decoder export module; the encoder (stateless)
is called before every decoder step, so a method that touches no state runs between calls of one
that does, and the decoder's caches must come through unchanged.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import torch_tensorrt_ext as tte
from hf_models import whisper_methods
from stateful_check import _torch_tensorrt

pytestmark = [pytest.mark.inspects_pte]


def _save_upstream(programs, args, path):
    """Each method through `torch_tensorrt.compile`, then `torch_tensorrt.executorch.export`."""
    torch_tensorrt = _torch_tensorrt()
    import torch_tensorrt.executorch  # noqa: F401, F811
    compiled = {}
    with tte.reference.engines():
        for name, ep in programs.items():
            gm = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(args[name]),
                                        min_block_size=1)
            compiled[name] = torch_tensorrt.dynamo.export(gm, arg_inputs=list(args[name]))
    path.write_bytes(torch_tensorrt.executorch.export(compiled).to_executorch().buffer)


@pytest.mark.parametrize("path_kind", ["reference", "upstream"])
def test_whisper_encoder_between_decoder_steps_like_eager(tmp_path, path_kind):
    encoder, decoder = whisper_methods()
    features = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        states = encoder(features)
    args = {"encoder": (features,), "decoder": (torch.tensor([[1]]), states, torch.tensor([0]))}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        programs = {"encoder": torch.export.export(encoder, args["encoder"]),
                    "decoder": torch.export.export(copy.deepcopy(decoder), args["decoder"])}
    path = tmp_path / "whisper.pte"
    if path_kind == "reference":
        tte.reference.export({n: (ep, None) for n, ep in programs.items()}, str(path))
    else:
        _save_upstream(programs, args, path)
    prog = tte.executorch.load(path)
    eager, token = copy.deepcopy(decoder), torch.tensor([[1]])
    caches = [n for n, _ in eager.named_buffers() if "_cache_" in n]
    for step in range(6):
        other = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(step + 1))
        with torch.no_grad():
            want_states = encoder(other)
            want = eager(token, states, torch.tensor([step]))
        torch.testing.assert_close(prog.run(other, method="encoder")[0], want_states,
                                   rtol=1e-5, atol=1e-5)
        got = prog.run(token, states, torch.tensor([step]), method="decoder")[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"{step}: {m}")
        state = prog.state()
        for name in caches:
            torch.testing.assert_close(state[name], eager.get_buffer(name), rtol=1e-5,
                                       atol=1e-5, msg=lambda m: f"{step} {name}: {m}")
        token = want.argmax(-1)
