"""ExecuTorch's own LLM runner (`TextLLMRunner`, the 1.5.1 wheel's) generates from
a `.pte` saved through the patched `torch_tensorrt.save` — reference engines, ExecuTorch's llama
(tiny, random init), a tokenizer written here — with no set-up beyond calling
`torch_tensorrt_ext.executorch.text_runner`: greedy text token-identical to eager PyTorch for
several prompts, a second prompt continuing the cache, and `reset()`. The runner's metadata is
checked at save and at open, naming what is missing.
"""
from __future__ import annotations

import copy
import json

import pytest
import torch

import torch_tensorrt_ext as tte
from torch_tensorrt_ext.errors import UsageError

from hybrid_models import Decoder
from rtx_env import torch_tensorrt_or_skip

llama_transformer = pytest.importorskip("executorch.examples.models.llama.llama_transformer")
model_args = pytest.importorskip("executorch.examples.models.llama.model_args")
pytest.importorskip("executorch.extension.llm.runner")

CHARS = [chr(c) for c in range(32, 127)]     # one token per printable ASCII character
BOS, EOS, NEW = 1, 2, 8
SPECIAL = ("<unk>", "<s>", "</s>")             # what the runner prints for ids 0..2
ARGS = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=3 + len(CHARS),
            max_seq_len=64, max_context_len=64, use_kv_cache=True, enable_dynamic_shape=False,
            hidden_dim=128)


def _tokenizer(path):
    """A tokenizer.json ExecuTorch's HF tokenizer reads: BPE without merges over printable ASCII
    (every token decodes to whole UTF-8 text, whatever a random model generates)."""
    from tokenizers import Tokenizer, models
    vocab = {**{t: i for i, t in enumerate(SPECIAL)}, **{c: i + 3 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.add_special_tokens(list(SPECIAL))
    tok.save(str(path))
    return path


def _model():
    torch.manual_seed(0)
    return Decoder(llama_transformer.construct_transformer(model_args.ModelArgs(**ARGS))).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from torch_tensorrt_ext.executorch import runner_metadata
    torch_tensorrt = torch_tensorrt_or_skip()
    tmp = tmp_path_factory.mktemp("llm")
    model = _model()
    eager = copy.deepcopy(model)
    example = (torch.tensor([[BOS]]), torch.tensor([0]))
    ep = torch.export.export(model, example, strict=False)
    meta = runner_metadata(model_args.ModelArgs(**ARGS), bos_id=BOS, eos_ids=[EOS])
    with tte.reference.engines():
        trt = torch_tensorrt.compile(ep, ir="dynamo", arg_inputs=list(example))
        torch_tensorrt.save(trt, str(tmp / "llama.pte"), output_format="executorch",
                            arg_inputs=list(example), constant_methods=meta)
    return tmp / "llama.pte", _tokenizer(tmp / "tokenizer.json"), eager, trt, tmp


class EagerRunner:
    """The runner's greedy loop in eager PyTorch: a prompt's tokens (no BOS: `num_bos=0`) fed one
    per call from the cache's position, then each argmax fed back, NEW tokens generated
    (the last one not fed: the next prompt starts where the cache ends)."""

    def __init__(self, model):
        self.model, self.pos = copy.deepcopy(model), 0

    def generate(self, prompt: str) -> str:
        ids = [CHARS.index(c) + 3 for c in prompt]
        out = []
        with torch.no_grad():
            for t in ids:
                logits = self._step(t)
            for k in range(NEW):
                nxt = int(logits.reshape(-1, logits.shape[-1])[-1].argmax())
                out.append(nxt)
                if nxt == EOS or k == NEW - 1:
                    break
                logits = self._step(nxt)
        return "".join(SPECIAL[i] if i < 3 else CHARS[i - 3] for i in out)

    def _step(self, token):
        logits = self.model(torch.tensor([[token]]), torch.tensor([self.pos]))
        self.pos += 1
        return logits


def _generate(runner, prompt: str) -> str:
    from executorch.extension.llm.runner import GenerationConfig
    pieces = []
    runner.generate(prompt, GenerationConfig(echo=False, max_new_tokens=NEW, temperature=0.0,
                                             num_bos=0), token_callback=pieces.append)
    return "".join(pieces)


@pytest.mark.parametrize("prompt", ["hello world", "the KV cache", "x"])
def test_the_runner_generates_what_eager_generates(saved, prompt):
    from torch_tensorrt_ext.executorch import text_runner
    pte, tokenizer, eager, _, _ = saved
    got = _generate(text_runner(pte, tokenizer), prompt)
    assert got and got == EagerRunner(eager).generate(prompt)


def test_the_runner_reads_the_weights_from_the_ptd(saved):
    """ExecuTorch's runner with the `.ptd` (`data_path`): the same text as eager; the `.pte`
    alone holds no weights and is refused naming a key."""
    from torch_tensorrt_ext.executorch import runner_metadata, text_runner
    _, tokenizer, eager, trt, tmp = saved
    torch_tensorrt = torch_tensorrt_or_skip()
    meta = runner_metadata(model_args.ModelArgs(**ARGS), bos_id=BOS, eos_ids=[EOS])
    with tte.reference.engines(), tte.executorch.save_data_externally("llama_w"):
        torch_tensorrt.save(trt, str(tmp / "apart.pte"), output_format="executorch",
                            arg_inputs=[torch.tensor([[BOS]]), torch.tensor([0])],
                            constant_methods=meta)
    got = _generate(text_runner(tmp / "apart.pte", tokenizer, tmp / "llama_w.ptd"), "kv")
    assert got and got == EagerRunner(eager).generate("kv")
    with pytest.raises(UsageError, match="data file .*nothing.ptd does not exist"):
        text_runner(tmp / "apart.pte", tokenizer, tmp / "nothing.ptd")


def test_a_second_prompt_continues_the_cache_and_reset_starts_over(saved):
    from torch_tensorrt_ext.executorch import text_runner
    pte, tokenizer, eager, _, _ = saved
    runner, want = text_runner(pte, tokenizer), EagerRunner(eager)
    first = _generate(runner, "hello world")
    assert first == want.generate("hello world")
    second = _generate(runner, " and then")
    assert second == want.generate(" and then")
    assert second != EagerRunner(eager).generate(" and then")   # the cache made a difference
    runner.reset()
    assert _generate(runner, "hello world") == first


def test_a_pte_without_the_runners_metadata_is_refused_naming_it(saved):
    from torch_tensorrt_ext.executorch import text_runner
    torch_tensorrt = torch_tensorrt_or_skip()
    _, tokenizer, _, trt, tmp = saved
    bare = tmp / "bare.pte"
    example = [torch.tensor([[BOS]]), torch.tensor([0])]
    with tte.reference.engines():
        torch_tensorrt.save(trt, str(bare), output_format="executorch", arg_inputs=example)
    with pytest.raises(UsageError, match=r"has no method 'get_max_seq_len': ExecuTorch's LLM "
                                         r"runner reads its metadata"):
        text_runner(bare, tokenizer)


@pytest.mark.parametrize("methods,message", [
    ({"get_max_context_len": 64}, "names ExecuTorch's LLM runner's ['get_max_context_len'] "
                                  "but not 'get_max_seq_len'"),
    ({"get_max_seq_len": "64"}, "constant_methods['get_max_seq_len'] is '64'; ExecuTorch's LLM "
                                "runner reads it as the longest sequence one call may take: "
                                "give a positive int"),
    ({"get_max_seq_len": 64, "get_eos_ids": 2}, "constant_methods['get_eos_ids'] is 2;"),
])
def test_save_refuses_runner_metadata_the_runner_cannot_read(saved, methods, message):
    torch_tensorrt = torch_tensorrt_or_skip()
    _, _, _, trt, tmp = saved
    path = tmp / "refused.pte"
    with pytest.raises(UsageError) as e, tte.reference.engines():
        torch_tensorrt.save(trt, str(path), output_format="executorch",
                            arg_inputs=[torch.tensor([[BOS]]), torch.tensor([0])],
                            constant_methods=methods)
    assert message in str(e.value)
    assert not path.exists()


def test_runner_metadata_from_a_transformers_config():
    transformers = pytest.importorskip("transformers")
    from torch_tensorrt_ext.contracts.llm_metadata import runner_metadata
    cfg = transformers.LlamaConfig(vocab_size=98, max_position_embeddings=48, bos_token_id=1,
                                   eos_token_id=[2, 3])
    assert runner_metadata(cfg) == {
        "get_max_seq_len": 48, "get_max_context_len": 48, "use_kv_cache": True,
        "enable_dynamic_shape": False, "get_vocab_size": 98, "get_bos_id": 1,
        "get_eos_ids": [2, 3]}
    assert json.dumps(runner_metadata(cfg))     # plain values, as constant methods need


def test_the_runtime_library_is_an_attribute_of_the_package():
    assert tte.runtime_lib.load is not None
    assert "TensorRTBackend" in tte.runtime_lib.__doc__


_PLAIN_RUNNER = """
import json, sys
import torch_tensorrt_ext.executorch  # noqa: F401  (registers the delegate, as a backend does)
from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
runner, pieces = TextLLMRunner(sys.argv[1], sys.argv[2]), []
runner.generate(sys.argv[3], GenerationConfig(echo=False, max_new_tokens=int(sys.argv[4]),
                temperature=0.0, num_bos=0), token_callback=pieces.append)
print(json.dumps("".join(pieces)))
"""


def test_executorchs_plain_runner_generates_after_importing_the_package(saved):
    """ExecuTorch's `TextLLMRunner` itself, no `text_runner`, in a fresh process
    whose only set-up is the import."""
    import subprocess
    import sys
    pte, tokenizer, eager, _, _ = saved
    done = subprocess.run([sys.executable, "-c", _PLAIN_RUNNER, str(pte), str(tokenizer),
                           "hello world", str(NEW)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got and got == EagerRunner(eager).generate("hello world")
