"""The verifier of a saved program's state writes (`executorch.inspecting.verify_writes`): it
reads only the emitted program and each delegate runtime's own binding plan, accepts
every program the pipeline saves, and refuses each deliberately broken one — a copy-back entry
removed
from a blob, a write-back dropped, a write-back duplicated, a write the source does not make —
naming the method, the buffer and the writers it found. Every save runs it: a refusal leaves no
file."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from e2e_models import MODELS
from executorch.exir import schema
from executorch.exir._serialize._program import deserialize_pte_binary
from plan_models import (AccumulatedByMap, RingWrittenInABranch, StateReadOnTheHost,
                         TwoBuffersWrittenFromConds)
from stateful_check import ModuleProgram, check_program

import torch_tensorrt_ext as tte
from torch_tensorrt_ext import reference
from torch_tensorrt_ext.cli import main
from torch_tensorrt_ext.contracts import blob as blobfmt
from torch_tensorrt_ext.executorch.inspecting import verify_writes as vw


def _saved(model, args, path, **kw):
    ep = torch.export.export(copy.deepcopy(model), args)
    reference.export(ep, args, path, **kw)
    return ep, path.read_bytes()


def _program(data: bytes) -> schema.Program:
    return deserialize_pte_binary(data).program


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_saved_program_writes_each_mutated_buffer_once(tmp_path, name):
    factory, args_of, _ = MODELS[name]
    ep, data = _saved(factory().eval(), args_of(0), tmp_path / "m.pte")
    mutated = vw.mutated_by(ep)["forward"]
    writers = vw.method_writers(data)["forward"]
    assert {f for f, w in writers.items() if w} == mutated
    assert all(len(w) == 1 for f, w in writers.items() if f in mutated)
    tte.executorch.verify(data, ep)


def _host_read(tmp_path):
    args = (torch.randn(1, 8),)
    return _saved(StateReadOnTheHost(), args, tmp_path / "h.pte",
                  torch_executed_ops=["aten.sin.default"])


def _write_back(plan: schema.ExecutionPlan, fqn: str):
    """(chain, position) of the `aten::copy_` writing buffer `fqn` back."""
    (index,) = [i for i, v in enumerate(plan.values) if isinstance(v.val, schema.Tensor)
                and v.val.extra_tensor_info is not None
                and v.val.extra_tensor_info.fully_qualified_name == fqn]
    for chain in plan.chains:
        for k, ins in enumerate(chain.instructions):
            a = ins.instr_args
            if isinstance(a, schema.KernelCall) and plan.operators[a.op_index].name == \
                    "aten::copy_" and a.args[0] == index:
                return chain, k
    raise AssertionError(f"no write-back of {fqn}")


def test_a_dropped_write_back_is_refused(tmp_path):
    ep, data = _host_read(tmp_path)
    program = _program(data)
    vw.verify_writes(program, vw.mutated_by(ep))        # as saved: accepted
    chain, k = _write_back(program.execution_plan[0], "state")
    del chain.instructions[k]
    with pytest.raises(vw.WriteVerifyError) as e:
        vw.verify_writes(program, vw.mutated_by(ep))
    assert str(e.value).startswith(
        "method 'forward': buffer 'state' is mutated by the source, but no instruction of the "
        "saved program writes it (no write-back copy, no delegate writing or copying into its "
        "binding): the write would be lost.")


def test_a_duplicated_write_back_is_refused(tmp_path):
    ep, data = _host_read(tmp_path)
    program = _program(data)
    chain, k = _write_back(program.execution_plan[0], "state")
    chain.instructions.insert(k, copy.deepcopy(chain.instructions[k]))
    with pytest.raises(vw.WriteVerifyError) as e:
        vw.verify_writes(program, vw.mutated_by(ep))
    assert str(e.value).startswith(
        "method 'forward': buffer 'state' is written 2 times per call, by kernel aten::copy_, "
        "kernel aten::copy_; exactly one writer is allowed")


def _without_copy_back(program: schema.Program) -> None:
    for d in program.backend_delegate_data:
        blob = blobfmt.parse(d.data)
        if blob.metadata.copy_back:
            meta = dataclasses.replace(blob.metadata, copy_back=())
            d.data = blobfmt.serialize(meta, blob.engine)


def test_a_copy_back_entry_removed_from_a_blob_is_refused(tmp_path):
    """returns_its_state: the new value is a delegate output *and* copied into the buffer; with
    the blob's copy_back entry gone the blob is still valid — and the write is lost."""
    factory, args_of, _ = MODELS["returns_its_state"]
    ep, data = _saved(factory().eval(), args_of(0), tmp_path / "r.pte")
    program = _program(data)
    _without_copy_back(program)
    assert vw.method_writers(program)["forward"] == {"n": []}
    with pytest.raises(vw.WriteVerifyError, match="buffer 'n' is mutated by the source, but no "
                                                  "instruction of the saved program writes it"):
        vw.verify_writes(program, vw.mutated_by(ep))


def test_a_write_the_source_does_not_make_is_refused(tmp_path):
    factory, args_of, _ = MODELS["ring_buffer"]
    _, data = _saved(factory().eval(), args_of(0), tmp_path / "g.pte")
    with pytest.raises(vw.WriteVerifyError) as e:
        vw.verify_writes(data, {"forward": set()})
    assert str(e.value).startswith(
        "method 'forward': buffer 'ring' is not mutated by the source, but the saved program "
        "writes it (delegate delegate 0 (copy output1 -> b_ring))")


def test_save_runs_the_verifier_and_writes_nothing_it_refuses(tmp_path, monkeypatch):
    """Every save verifies the emitted program: a runtime plan that would not copy (here its
    report is emptied, a stand-in for a runtime that drops a copy) fails the save, no file."""
    monkeypatch.setattr(vw, "_blob_writes", lambda blob: [])
    factory, args_of, _ = MODELS["ring_buffer"]
    with pytest.raises(vw.WriteVerifyError, match="buffer 'ring' is mutated by the source, but "
                                                  "no instruction"):
        reference.export(factory().eval(), args_of(0), tmp_path / "x.pte")
    assert not (tmp_path / "x.pte").exists()


def test_inspect_verify_checks_a_pte_against_its_source(tmp_path, capsys):
    factory, args_of, _ = MODELS["returns_its_state"]
    ep, data = _saved(factory().eval(), args_of(0), tmp_path / "r.pte")
    torch.export.save(ep, tmp_path / "r.pt2")
    assert main(["inspect", str(tmp_path / "r.pte"), "--verify", "--source",
                 str(tmp_path / "r.pt2")]) == 0
    assert "every state write verified" in capsys.readouterr().out
    pte = deserialize_pte_binary(data)
    program = pte.program
    _without_copy_back(program)
    from executorch.exir._serialize._program import PTEFile, serialize_pte_binary
    bad = tmp_path / "bad.pte"
    bad.write_bytes(bytes(serialize_pte_binary(PTEFile(
        program=program, mutable_data=pte.mutable_data, named_data=pte.named_data))))
    assert main(["inspect", str(bad), "--verify", "--source", str(tmp_path / "r.pt2")]) == 1
    assert "buffer 'n' is mutated by the source, but no instruction" in capsys.readouterr().err


def _ring_in_a_branch():
    """RingWrittenInABranch through the public flow, 4 steps against eager (both branches
    taken); its saved bytes."""
    seen = {}
    program = ModuleProgram(RingWrittenInABranch, RingWrittenInABranch.args, ("ring",))
    result = check_program(program, steps=4, observe=seen.setdefault)
    assert result.ok, result.report(program)
    return seen["pte"]


def _branch_moves(plan: schema.ExecutionPlan) -> list[schema.MoveCall]:
    """The moves of a `cond`'s branches' results into its output, in branch order."""
    return [ins.instr_args for chain in plan.chains for ins in chain.instructions
            if isinstance(ins.instr_args, schema.MoveCall)]


@pytest.mark.emulated_device
def test_the_walk_follows_a_branch_result_into_the_write():
    """The cond's result is computed inside its branches (moved into the
    cond's output); the verifier follows the jumps and accepts the write-back from it (no
    control-flow op after it: no copy of the result either)."""
    program = _program(_ring_in_a_branch())
    moves = _branch_moves(program.execution_plan[0])
    assert len(moves) == 2 and moves[0].move_to == moves[1].move_to
    (writer,) = vw.method_writers(program)["forward"]["ring"]
    assert (writer.what, writer.value) == ("aten::copy_", moves[0].move_to)
    vw.verify_writes(program, {"forward": {"ring"}})


@pytest.mark.parametrize("branch", [0, 1])
def test_a_branch_handing_on_the_buffers_old_value_is_refused(branch):
    """A branch that moves the ring's own old value into the cond's output (the write-back
    would then keep the old state on that path) is refused, whichever branch it is."""
    program = _program(_ring_in_a_branch())
    plan = program.execution_plan[0]
    _branch_moves(plan)[branch].move_from = vw.mutable_buffers(plan)["ring"][0]
    with pytest.raises(vw.WriteVerifyError) as e:
        vw.verify_writes(program, {"forward": {"ring"}})
    assert str(e.value).startswith(
        "method 'forward': buffer 'ring' is written by kernel aten::copy_ from a value nothing "
        "computes in this call")


def test_a_write_back_inside_one_branch_only_is_refused():
    """The ring's write-back copied into the true branch (after its result is moved): that path
    writes the ring twice, the other once — refused as a write on some paths only."""
    program = _program(_ring_in_a_branch())
    plan = program.execution_plan[0]
    chain, k = _write_back(plan, "ring")
    ins = chain.instructions
    at = next(i for i, x in enumerate(ins) if isinstance(x.instr_args, schema.MoveCall)) + 1
    for x in ins:
        if isinstance(x.instr_args, schema.JumpFalseCall) and \
                x.instr_args.destination_instruction >= at:
            x.instr_args.destination_instruction += 1
    ins.insert(at, copy.deepcopy(ins[k]))
    with pytest.raises(vw.WriteVerifyError) as e:
        vw.verify_writes(program, {"forward": {"ring"}})
    assert str(e.value).startswith(
        "method 'forward': buffer 'ring' is written on some paths of a call only (by kernel "
        "aten::copy_, kernel aten::copy_, inside a branch of a control-flow op)")


def _map_program():
    """AccumulatedByMap exported and emitted by ExecuTorch (buffer names kept); its source."""
    from executorch.exir import ExecutorchBackendConfig, to_edge
    ep = torch.export.export(AccumulatedByMap(), (torch.randn(3, 4),))
    config = ExecutorchBackendConfig(emit_mutable_buffer_names=True)
    return ep, to_edge(ep).to_executorch(config).executorch_program


def test_a_buffer_written_from_a_map_result_is_accepted_and_its_lost_rows_refused():
    """A `map`'s result is stacked into its output by `et_copy_index` inside the emitted loop:
    a write-back from it is computed in the call; with that copy gone, refused."""
    ep, program = _map_program()
    vw.verify_writes(program, vw.mutated_by(ep))
    ins = program.execution_plan[0].chains[0].instructions
    (k,) = [i for i, x in enumerate(ins) if isinstance(x.instr_args, schema.KernelCall) and
            program.execution_plan[0].operators[x.instr_args.op_index].name ==
            "executorch_prim::et_copy_index"]
    for x in ins:
        if isinstance(x.instr_args, schema.JumpFalseCall) and \
                x.instr_args.destination_instruction > k:
            x.instr_args.destination_instruction -= 1
    del ins[k]
    with pytest.raises(vw.WriteVerifyError) as e:
        vw.verify_writes(program, vw.mutated_by(ep))
    assert str(e.value).startswith(
        "method 'forward': buffer 'acc' is written by kernel aten::copy_ from a value nothing "
        "computes in this call")


def _two_conds(*passes):
    """TwoBuffersWrittenFromConds exported and emitted by ExecuTorch (buffer names kept, the
    edge passes `passes` first); its source."""
    from executorch.exir import ExecutorchBackendConfig, to_edge
    with torch.no_grad():
        ep = torch.export.export(TwoBuffersWrittenFromConds().eval(),
                                 TwoBuffersWrittenFromConds.args(0))
        config = ExecutorchBackendConfig(emit_mutable_buffer_names=True, passes=list(passes))
        return ep, to_edge(ep).to_executorch(config).executorch_program


def test_a_write_from_a_cond_result_a_later_cond_overwrote_is_refused():
    """ExecuTorch alone moves the first cond's branch tensor into its
    result, and the second cond's branch computes into the same memory before the write-back of
    `a` reads it — refused, naming the buffer and the overwriting kernel; with the save's copy of
    such results (`saving.branch_results`) the same program is accepted."""
    from executorch.exir.dialects._ops import ops as exir_ops

    from torch_tensorrt_ext.executorch.saving.branch_results import CopyBranchResults
    ep, program = _two_conds()
    with pytest.raises(vw.WriteVerifyError) as e:
        vw.verify_writes(program, vw.mutated_by(ep))
    assert str(e.value).startswith(
        "method 'forward': buffer 'a' is written by kernel aten::copy_ from the result of a "
        "control-flow op (a torch.cond branch's tensor, handed on by a move) whose memory kernel "
        "aten::sub.out overwrites before the write: the buffer would get that instruction's "
        "values")
    ep, program = _two_conds(CopyBranchResults(exir_ops.edge.dim_order_ops._clone_dim_order
                                               .default))
    vw.verify_writes(program, vw.mutated_by(ep))


class _UpdateCache(torch.nn.Module):
    """ExecuTorch llama's custom KV write: `llama::update_cache` writes T positions of the cache
    in place from a start read with `.item()` (T dynamic), the cache read whole after it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, 16, 2, 4))

    def forward(self, x, input_pos):
        start = input_pos[0].item()
        torch._check(start >= 0)
        torch._check(start + x.shape[1] <= 16)
        torch.ops.llama.update_cache(x, self.k_cache, start)
        return self.k_cache.sum(1) * 2

    @staticmethod
    def args(t: int, start: int):
        return (torch.randn(1, t, 2, 4, generator=torch.Generator().manual_seed(start)),
                torch.tensor([start]))


def test_a_kernel_writing_part_of_a_buffer_in_place_is_accepted(tmp_path):
    """`llama::update_cache` (schema `Tensor(a!) cache`) writes T of the cache's
    16 positions in place: a write of part of the buffer, not a dropped one — the save accepts it
    (it was refused: "written by kernel llama::update_cache.out with 256 bytes; the write must
    cover the whole buffer") and the `.pte` steps like eager, prompts of 5 and 3, then decodes."""
    pytest.importorskip("executorch.extension.llm.custom_ops.custom_ops")
    model = _UpdateCache().eval()
    t = torch.export.Dim("T", max=8)
    ep = torch.export.export(model, _UpdateCache.args(4, 0), dynamic_shapes=({1: t}, None))
    path = reference.export(ep, str(tmp_path / "u.pte"))
    data = open(path, "rb").read()
    (writer,) = vw.method_writers(data)["forward"]["k_cache"]
    assert (writer.kind, writer.what, writer.nbytes, writer.in_place) == (
        "kernel", "llama::update_cache.out", 8 * 2 * 4 * 4, True)
    prog, eager = tte.executorch.load(path), copy.deepcopy(model)
    for t, start in ((5, 0), (3, 5), (1, 8), (1, 9)):
        args = _UpdateCache.args(t, start)
        with torch.no_grad():
            want = eager(*args)
        torch.testing.assert_close(prog.run(*args)[0], want, msg=lambda m: f"T={t}: {m}")
        torch.testing.assert_close(prog.state()["k_cache"], eager.k_cache)


def test_a_copy_covering_part_of_a_buffer_is_still_refused(tmp_path):
    """A copy is no in-place update: the write-back `copy_` of a value covering half the buffer
    (its source value's recorded shape cut to [1, 4] of the buffer's [1, 8]) is refused."""
    ep, data = _host_read(tmp_path)
    program = _program(data)
    plan = program.execution_plan[0]
    chain, k = _write_back(plan, "state")
    source = chain.instructions[k].instr_args.args[1]
    plan.values[source].val.sizes = [1, 4]
    with pytest.raises(vw.WriteVerifyError) as e:
        vw.verify_writes(program, vw.mutated_by(ep))
    assert str(e.value) == (
        "method 'forward': buffer 'state' (32 bytes) is written by kernel aten::copy_ with 16 "
        "bytes; the write must cover the whole buffer")
