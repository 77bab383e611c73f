"""A grammar of small random programs of several methods sharing one state, as hypothesis
strategies (so shrinking is free) — how users ship LLMs (prefill + decode), Whisper (an encoder
beside a decoder whose cross-attention state one step fills and the others only read) and VLMs (a
stateless vision method between decode steps).

A `MethodsProgram` is one module with 1-6 buffers (`State`: a `kv` cache written at the call's
positions, an int64 `counter` of tokens, a `ring` of the last rows, an `ema`, a `cross` state
copied from a method's input, a `prefix` cache written at a start read with `.item()`
(`narrow(1, start, T).copy_`) whose token methods read its valid part `[:start + T]`, as
ExecuTorch's Gemma 4 attends over its cache; and up to two `cell`s: a buffer of the
single-method grammar, `stateful_grammar.Buf`, any of its 27 kinds and their dtypes, written by
that grammar's own code from the method's means over its tokens and the call's first position —
the KV forms users write, `.item()` starts, `torch.cond`, scatters, broadcasting copies, bool and
integer state) and 2-4
methods (`Method`), each of one `KINDS` role:
`prefill` (a dynamic token length), `chunk` (a static 3-token prefill), `decode` (one token) —
these take `x [1, T, F]` and `pos [T]` — and `fill` (writes state from `x [1, F]`), `read`
(only reads state), `encode` (touches no state), which take `x [1, F]`. Each method writes and
reads the buffers it drew, reads before or after its writes. `calls` is a drawn interleaving of
the methods and `reset` (a call that would run past the cache starts a new sequence: the driver
resets first); `path` the save path (`SAVE_PATHS`), `external` weights in a `.ptd`;
`precision` the recipe's (`PRECISIONS`: the "recipe" path casts the model to fp16 / bf16 as eager's
`model.to(dtype)`, its floating inputs too; every other path fp32); `norm` an RMSNorm after the
input projection written as transformers write it, computing in `.float()` and casting back; a
`held` state is written through another object holding it (`self.held.kv`, as transformers' cache
layers write their module's buffers; such a program is exported `strict`, as its authors do, and
`strict` is drawn for the others); `grad` False: the methods exported under `torch.no_grad()`,
as ExecuTorch's export scripts (and its export API, the "recipe" path, always) export them;
`save_dims` False (path "upstream") saves the prefill without
its dynamic dims, so its `.pte` refuses every other length (`refused`) and changes no state.
`program.source()` is the module as standalone Python; inputs of call `i` are deterministic from
the program's seed (`program.call_args(i, ...)`).
"""
from __future__ import annotations

import dataclasses
import functools
import linecache

import torch
from hypothesis import strategies as st

import stateful_grammar as single

F, S, RING = 8, 12, 3
STATE_KINDS = ("kv", "counter", "ring", "ema", "cross", "prefix")
# role -> (takes tokens and positions, state kinds it may write)
KINDS = {"prefill": (True, STATE_KINDS), "chunk": (True, STATE_KINDS),
         "decode": (True, STATE_KINDS), "fill": (False, ("counter", "ring", "ema", "cross")),
         "read": (False, ()), "encode": (False, ())}
CHUNK = 3
EXAMPLE_T = {"prefill": 4, "chunk": CHUNK}    # tokens of each method's example inputs
SAVE_PATHS = ("reference", "upstream", "recipe")
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class State:
    kind: str = "kv"
    no_grad: bool = False       # its writes inside `with torch.no_grad():` (a cell: its own)
    cell: single.Buf | None = None   # kind "cell": a buffer of the single-method grammar
    held: bool = False          # written through another object holding it (`self.held.<kind>`,
                                # as transformers' cache layers write their module's buffers)

    @property
    def name(self) -> str:
        """The buffer's name (its FQN is `m.<name>`); methods' `writes` / `reads` name it."""
        return f"c_{self.cell.kind}" if self.cell else self.kind

    @property
    def half(self) -> bool:
        return self.cell is not None and self.cell.dtype in ("bfloat16", "float16")


def may_write(role: str, state: State) -> bool:
    """Whether a method of `role` may write `state`: a cell whose code reads a position
    (`single.POSITIONS`) only in a method that takes positions."""
    if state.cell is None:
        return state.kind in KINDS[role][1]
    return KINDS[role][0] or (role == "fill" and state.cell.kind not in single.POSITIONS)


@dataclasses.dataclass(frozen=True)
class Method:
    role: str = "decode"
    writes: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    read_first: bool = False

    @property
    def tokens(self) -> bool:
        return KINDS[self.role][0]


@dataclasses.dataclass(frozen=True)
class MethodsProgram:
    states: tuple[State, ...] = (State(),)
    methods: tuple[Method, ...] = (Method("prefill", ("kv",)), Method("decode", ("kv",)))
    calls: tuple[tuple[str, int], ...] = (("prefill", 3), ("decode", 1))
    path: str = "reference"
    external: bool = False
    seed: int = 0
    precision: str = "fp32"
    norm: bool = False
    strict: bool = False        # torch.export's mode (held state: strict, as its authors export)
    save_dims: bool = True      # "upstream": the prefill's dynamic dims given at save; without
                                # them the .pte takes its example length, refusing the others
    grad: bool = True           # exported with grad enabled; False: under `torch.no_grad()`,
                                # as ExecuTorch's export scripts export (its export API, the
                                # "recipe" path, always does)

    @property
    def dtype(self) -> torch.dtype:
        return PRECISIONS[self.precision]

    def names(self) -> list[str]:
        return [m.role for m in self.methods]

    def method(self, name: str) -> Method:
        return self.methods[self.names().index(name)]

    def fqns(self) -> list[str]:
        """The buffers some method writes: the program's state (a buffer only read is a
        constant, checked through the outputs that read it)."""
        written = {k for m in self.methods for k in m.writes}
        return [f"m.{s.name}" for s in self.states if s.name in written]

    def kind_of(self, fqn: str) -> str:
        return fqn.split(".")[-1]

    @property
    def loose(self) -> bool:
        """Whether a written buffer is bf16 / fp16 in an fp32 program: its rounding then feeds
        fp32 values, which are held to bf16's tolerance (as the single-method check does)."""
        written = {k for m in self.methods for k in m.writes}
        return any(s.half for s in self.states if s.name in written)

    def features(self) -> set[str]:
        """What the program drew, as `dimension:value` labels (a run's figures count them)."""
        cells = {f"cell:{s.cell.kind}" for s in self.states if s.cell} | \
            {f"cell_dtype:{s.cell.dtype}" for s in self.states if s.cell}
        return ({f"state:{s.kind}" for s in self.states} | {f"role:{m.role}" for m in self.methods}
                | cells | {f"path:{self.path}", f"precision:{self.precision}",
                           f"norm:{self.norm}", f"external:{self.external}",
                           f"methods:{len(self.methods)}", f"strict:{self.strict}",
                           f"save_dims:{self.save_dims}",
                           f"grad:{self.grad and self.path != 'recipe'}"}
                | {f"held:{s.kind}" for s in self.states if s.held})

    def source(self) -> str:
        return _source(self)

    def build(self) -> torch.nn.Module:
        """The model in fp32, as its author writes it (a recipe casts it)."""
        return _namespace(self)["Model"]()

    def method_module(self, model: torch.nn.Module, name: str) -> torch.nn.Module:
        """Method `name` of `model` (a `build()`) as the module torch.export takes: its forward
        calls that method; the model's parameters and buffers under `m.`."""
        return _namespace(self)["Method"](model, name)

    def example_args(self, name: str) -> tuple:
        return _args(self.method(name), EXAMPLE_T.get(name, 1), 0,
                     torch.Generator().manual_seed(0))

    def refused(self, name: str, tokens: int) -> bool:
        """Whether the `.pte` refuses a call of `name` at `tokens` (saved without the prefill's
        dynamic dims: any length but its example's), running nothing."""
        return not self.save_dims and name == "prefill" and tokens != EXAMPLE_T[name]

    def dynamic_shapes(self, name: str):
        if name != "prefill":
            return None
        t = torch.export.Dim("T", min=1, max=S)
        return {"x": {1: t}, "pos": {0: t}}

    def call_args(self, i: int, name: str, tokens: int, start: int, dtype=None) -> tuple:
        """Call i's inputs, floating ones in `dtype` (default: the program's precision, what its
        `.pte` takes)."""
        g = torch.Generator().manual_seed(self.seed * 1000 + i)
        args = _args(self.method(name), tokens, start, g)
        dtype = dtype or self.dtype
        return tuple(a.to(dtype) if a.is_floating_point() else a for a in args)

    def schedule(self) -> list[tuple[str, int, int]]:
        """The calls as (method or "reset", tokens, start position), resets added where a
        sequence would run past the cache."""
        out, at = [], 0
        for name, t in self.calls:
            if name == "reset":
                out.append(("reset", 0, 0))
                at = 0
                continue
            tokens = t if self.method(name).tokens else 0
            if self.refused(name, tokens):
                out.append((name, tokens, at))     # nothing runs: the position stays
                continue
            if at + tokens > S:
                out.append(("reset", 0, 0))
                at = 0
            out.append((name, tokens, at))
            at += tokens
        return out


def _args(m: Method, tokens: int, start: int, g: torch.Generator) -> tuple:
    if not m.tokens:
        return (torch.randn(1, F, generator=g),)
    return torch.randn(1, tokens, F, generator=g), torch.arange(start, start + tokens)


# --- source --------------------------------------------------------------------------------

_INIT = {"kv": f"torch.zeros(1, {S}, {F})", "counter": "torch.zeros(1, dtype=torch.int64)",
         "ring": f"torch.zeros(1, {RING}, {F})", "ema": f"torch.zeros(1, {F})",
         "cross": f"torch.zeros(1, {F})", "prefix": f"torch.zeros(1, {S}, {F})"}
_READ = {"kv": "self.kv.sum(1)", "counter": "self.counter.to(out.dtype)",
         "ring": "self.ring.mean(1)", "ema": "self.ema", "cross": "self.cross",
         "prefix": "self.prefix.sum(1)"}
# a prefix read by a method that takes positions: the valid part `[:p + T]` (ExecuTorch Gemma 4's
# attention over its cache), sized by the start read from data
_PREFIX_READ = "self.prefix[:, :p + x.shape[1]].mean(1)"
_START = ["        p = pos[0].item()", "        torch._check(p >= 0)",
          f"        torch._check(p + x.shape[1] <= {S})"]


def _write(state: State, tokens: bool) -> str:
    t = f"self.held.{state.kind}" if state.held else f"self.{state.kind}"
    if state.kind == "kv":
        return f"{t}.index_copy_(1, pos, self.wk(h))"
    if state.kind == "counter":
        return f"{t}.add_(x.shape[1])" if tokens else f"{t}.add_(1)"
    if state.kind == "ring":
        rows = "h" if tokens else "h[:, None]"
        return f"{t}.copy_(torch.cat([{t}, {rows}], 1)[:, -{RING}:])"
    if state.kind == "ema":
        return f"{t}.mul_(0.5).add_(0.5 * self.we(hm))"
    if state.kind == "prefix":
        return f"{t}.narrow(1, p, x.shape[1]).copy_(self.wk(h))"
    return f"{t}.copy_(self.wc(hm))"


_NORM = ["        hf = h.float()",
         "        h = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)",
         "        h = h * self.nw"]


def _read(s: State, tokens: bool) -> str:
    if s.cell:
        return f"self.{s.name}.float().mean().to(out.dtype)"
    return _PREFIX_READ if tokens and s.kind == "prefix" else _READ[s.kind]


def _cell_write(s: State, i: int, tokens: bool) -> list[str]:
    """The single-method grammar's code of cell `s` (state number i) in a method: it reads `h` and
    `x` as [1, F] (a token method's means over its tokens) and its position `p{i}` from the first
    of the call's positions; what it hands back and its `h` feed `hm`."""
    lines = ["h_, x_ = h, x", f"h, x = hm, {'x.mean(1)' if tokens else 'x'}"]
    if s.cell.kind in single.POSITIONS:
        lines.append(f"p{i} = pos[:1] % {single.POSITIONS[s.cell.kind]}")
    code, outs = single.buffer_code(s.cell, i, f"self.{s.name}")
    lines += code + [f"h = h + {o}.float().mean().to(h.dtype) * 0.1" for o in outs]
    return lines + ["hm, h, x = h, h_, x_"]


def _method_source(m: Method, states: dict[str, tuple[int, State]], norm: bool) -> list[str]:
    args = "x, pos" if m.tokens else "x"
    lines = [f"    def {m.role}(self, {args}):",
             "        h = self.inp(x)", *(_NORM if norm else []),
             "        hm = h.mean(1)" if m.tokens else "        hm = h"]
    if m.role == "encode":
        return lines + ["        return (torch.relu(self.enc(hm)) * 3 + 1,)", ""]
    touched = [states[k][1].kind for k in (*m.writes, *m.reads)]
    if m.tokens and "prefix" in touched:
        lines += _START
    reads = ["        out = hm"] + [f"        out = out + {_read(states[k][1], m.tokens)}"
                                      for k in m.reads]
    writes = []
    for k in m.writes:
        i, state = states[k]
        if state.cell:
            writes += [f"        {line}" for line in _cell_write(state, i, m.tokens)]
            continue
        code = _write(state, m.tokens)
        writes += ["        with torch.no_grad():", f"            {code}"] \
            if state.no_grad else [f"        {code}"]
    body = reads + writes if m.read_first else writes + reads
    return lines + body + ["        return (self.out(out),)", ""]


def _source(p: MethodsProgram) -> str:
    states = {s.name: (i, s) for i, s in enumerate(p.states)}
    lines = ["import torch", "", "", "class Held:",
             "    \"\"\"Holds buffers of the model, which writes them through it.\"\"\"",
             "", "", "class Model(torch.nn.Module):", "    def __init__(self):",
             "        super().__init__()", f"        torch.manual_seed({p.seed})"]
    for name in ("inp", "wk", "we", "wc", "enc", "out"):
        lines.append(f"        self.{name} = torch.nn.Linear({F}, {F})")
    if p.norm:
        lines.append(f"        self.nw = torch.nn.Parameter(1 + 0.1 * torch.randn({F}))")
    for s in p.states:
        lines.append(f"        self.{single.register_line(s.name, s.cell)}" if s.cell else
                     f"        self.register_buffer({s.kind!r}, {_INIT[s.kind]})")
    if held := [s.kind for s in p.states if s.held]:
        lines.append("        self.held = Held()")
        lines += [f"        self.held.{k} = self.{k}" for k in held]
    lines.append("")
    for m in p.methods:
        lines += _method_source(m, states, p.norm)
    lines += ["", "class Method(torch.nn.Module):",
              "    \"\"\"One method of `model` as the module torch.export takes.\"\"\"", "",
              "    def __init__(self, model, name):", "        super().__init__()",
              "        self.m, self.name = model, name", "",
              "    def forward(self, x, pos=None):",
              "        method = getattr(self.m, self.name)",
              "        return method(x) if pos is None else method(x, pos)",
              ""]
    return "\n".join(lines)


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> dict:
    name = f"<methods-program-{abs(hash(source)):x}>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace: dict = {}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - our own generated source
    return namespace


def _namespace(p: MethodsProgram) -> dict:
    return _compiled(p.source())


# --- strategies ----------------------------------------------------------------------------

@st.composite
def _method(draw, role: str, states: tuple[State, ...]) -> Method:
    names = [s.name for s in states]
    may = [s.name for s in states if may_write(role, s)]
    writes = tuple(draw(st.lists(st.sampled_from(may), unique=True, max_size=3))) if may else ()
    reads = () if role == "encode" else tuple(draw(st.lists(st.sampled_from(names), unique=True,
                                                          max_size=3)))
    if role in ("fill",) and not writes and may:
        writes = (may[0],)
    if role == "read" and not reads:
        reads = (names[0],)
    return Method(role, writes, reads, draw(st.booleans()))


@st.composite
def _cell(draw, precision: str) -> State:
    """A buffer of the single-method grammar at the top of the model; in a half-precision recipe
    of float32 or a dtype the cast leaves alone (`model.to(dtype)` makes a float32 buffer the
    recipe's dtype; a bf16 buffer in an fp16 model would be a program eager cannot run)."""
    buf = dataclasses.replace(draw(single.buffers()), place="top")
    if precision != "fp32" and buf.dtype in ("bfloat16", "float16"):
        buf = dataclasses.replace(buf, dtype="float32")
    return State("cell", cell=buf)


@st.composite
def methods_programs(draw, paths=SAVE_PATHS) -> MethodsProgram:
    path = draw(st.sampled_from(paths))
    precision = draw(st.sampled_from(tuple(PRECISIONS))) if path == "recipe" else "fp32"
    kinds = tuple(draw(st.lists(st.sampled_from(STATE_KINDS), unique=True, max_size=4)))
    cells = tuple(draw(st.lists(_cell(precision), min_size=0 if kinds else 1, max_size=2,
                                unique_by=lambda c: c.name)))
    # held state only in fp32: the recipe's cast `model.to(dtype)` makes new buffers, which a
    # holder does not follow (eager would write the old ones)
    states = tuple(State(k, draw(st.booleans()) and draw(st.booleans()),
                         held=precision == "fp32" and draw(st.integers(0, 3)) == 0)
                   for k in kinds) + cells
    roles = draw(st.lists(st.sampled_from(tuple(KINDS)), unique=True, min_size=2, max_size=4))
    methods = tuple(draw(_method(r, states)) for r in roles)
    if not any(m.writes for m in methods):
        first = next((i for i, m in enumerate(methods)
                      if any(may_write(m.role, s) for s in states)), None)
        if first is None:
            methods = methods + (Method("decode", (states[0].name,)),)
        else:
            may = next(s.name for s in states if may_write(methods[first].role, s))
            methods = tuple(dataclasses.replace(m, writes=(may,)) if i == first else m
                            for i, m in enumerate(methods))
    names = [m.role for m in methods]
    call = st.tuples(st.sampled_from(names + ["reset"]), st.integers(1, 4))
    calls = tuple(draw(st.lists(call, min_size=3, max_size=8)))
    calls = tuple((n, t if n == "prefill" else (CHUNK if n == "chunk" else 1)) for n, t in calls)
    external, seed, norm = draw(st.booleans()), draw(st.integers(0, 3)), draw(st.booleans())
    strict = any(s.held for s in states) or draw(st.booleans())
    save_dims = path != "upstream" or "prefill" not in names or draw(st.integers(0, 3)) > 0
    grad = path == "recipe" or draw(st.booleans())
    return MethodsProgram(states, methods, calls, path, external, seed, precision, norm,
                          strict, save_dims, grad)
