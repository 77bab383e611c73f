"""`copier.decide`, the one decision of who copies a copy-back write: one row per branch, each
asserting the copier and the reason a user reads; and `sites` on a graph (a second buffer taking
an output already copied is the program's)."""
import operator

import pytest
import torch
from torch.fx import Graph

from torch_tensorrt_ext.contracts.plan import BufferWrite, Copier, WriteKind
from torch_tensorrt_ext.lowering.copier import CopySite, decide, sites

ENGINE = CopySite("ring", "_run_on_acc_0", "output1", "b_ring")

ROWS = [   # (site, copier, the reason's text)
    (ENGINE, Copier.ENGINE,
     "engine '_run_on_acc_0' copies output 'output1' into input 'b_ring' itself"),
    (CopySite("ring", None, computed_by="aten.add.Tensor (add_3)"), Copier.PROGRAM,
     "its new value is computed by aten.add.Tensor (add_3), not handed out by an engine"),
    (CopySite("ring", "_run_on_acc_0", None), Copier.PROGRAM,
     "computed by the program, not handed out by an engine"),
    (CopySite("ring", "_run_on_acc_0", "output1", None), Copier.PROGRAM,
     "engine '_run_on_acc_0' does not take the buffer as an input"),
    (CopySite("ring", "_run_on_acc_0", "output1", "b_ring", buffer_readers=("engine 'e1'",)),
     Copier.PROGRAM, "the buffer is also read by engine 'e1' (a copy right after the engine"),
    (CopySite("ring", "_run_on_acc_0", "output1", "b_ring", mismatch="has a dynamic shape [s0]"),
     Copier.PROGRAM, "output 'output1' has a dynamic shape [s0]"),
    (CopySite("ring", "_run_on_acc_0", "output1", "b_ring", hands_out=False), Copier.PROGRAM,
     "engine '_run_on_acc_0' hands out nothing the program reads"),
    (CopySite("ring", "_run_on_acc_0", "output1", "b_ring", claimed_by="other"), Copier.PROGRAM,
     "output 'output1' is already copied into buffer 'other'"),
]


@pytest.mark.parametrize("site,copier,why", ROWS, ids=[
    "engine", "not-an-engine-value", "no-output-binding", "engine-lacks-buffer",
    "buffer-read-elsewhere", "mismatch", "hands-out-nothing", "output-claimed"])
def test_each_branch_of_decide(site, copier, why):
    d = decide(site)
    assert d.fqn == "ring" and d.copier is copier and why in d.why
    if copier is Copier.ENGINE:
        assert (d.engine, d.output, d.input) == ("_run_on_acc_0", "output1", "b_ring")
    else:
        assert d.why.startswith("written back by the program: ") and d.engine is None


def test_the_first_failing_fact_is_the_reason():
    """Facts are read in one order, so the reason names the first that stops the delegate."""
    site = CopySite("ring", "_run_on_acc_0", "output1", None, buffer_readers=("x",),
                    mismatch="m", hands_out=False, claimed_by="other")
    assert "does not take the buffer" in decide(site).why


def _two_buffers_one_output():
    """One engine output written into two buffers `a` and `b`, the call's result returned."""
    g = Graph()
    x = g.placeholder("x")
    bufs = {f: g.get_attr(f) for f in ("a", "b")}
    for n in (x, *bufs.values()):
        n.meta["val"] = torch.empty(4)
    call = g.call_module("_run_on_acc_0", (x, bufs["a"], bufs["b"]))
    out0 = g.call_function(operator.getitem, (call, 0))
    out0.meta["val"] = torch.empty(4)
    g.output((out0,))
    plan = [BufferWrite(f, WriteKind.COPY_BACK, "aten.copy_", "r", engine="_run_on_acc_0",
                        output_binding="output0", input_binding=f"b_{f}") for f in ("a", "b")]
    return plan, {"a": out0, "b": out0}, bufs, [out0]


def test_sites_give_an_output_to_its_first_buffer_only():
    plan, values, bufs, outs = _two_buffers_one_output()
    decided = [decide(s) for s in sites(plan, values, bufs, outs)]
    assert [d.copier for d in decided] == [Copier.ENGINE, Copier.PROGRAM]
    assert "output 'output0' is already copied into buffer 'a'" in decided[1].why
