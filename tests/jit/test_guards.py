"""Guard or warn: a table of Python-read patterns, each run compiled and eager on both backends.

Every pattern builds a fresh compiled target, calls it, changes a Python value it
read (or, for side effects, just calls again), and calls it once more. Each row
says what kiln does with the read:

- "guard": the change retraces, and every call equals eager (no warning);
- "warn": a one-time RuntimeWarning at trace time names the read (`match`) and the
  fix; with fullgraph=True it is a GraphBreakError instead;
- "eager": the call signature falls back to eager (equal to eager), with a warning.

docs/guards.md shows the same table to users; tests/docs checks they agree.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import random
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import kiln
from kiln.jit.backends import BACKENDS, cpu
from kiln.jit.trace import GraphBreakError

BACKEND_NAMES = ["interpret"] + (["cpu"] if "cpu" in BACKENDS and cpu.available() else [])


@dataclasses.dataclass
class Case:
    """One row: a fresh target (fn or module), its args, the change, the expected treatment."""

    target: Any
    args: tuple
    mutate: Callable[[], None] = lambda: None
    eager: Callable | None = None  # what the target computes eagerly (defaults to the target)


@dataclasses.dataclass
class Pattern:
    name: str
    cls: str  # which class of Python read it belongs to (the docs table groups by it)
    expect: str  # "guard", "branch" (a guarded plan per path: kiln/jit/branches.py), "warn" or "eager"
    build: Callable[[], Case]
    match: str = ""  # a piece of the warning text (the read, as spelled in the source)
    options: dict = dataclasses.field(default_factory=dict)  # kiln.compile options (dynamic_dims)


PATTERNS: list[Pattern] = []


def pattern(name: str, cls: str, expect: str, match: str = "", **options: Any) -> Callable:
    def register(build: Callable[[], Case]) -> Callable[[], Case]:
        PATTERNS.append(Pattern(name, cls, expect, build, match, options))
        return build
    return register


def x3() -> kiln.Tensor:
    return kiln.tensor([1.0, -2.0, 3.0])


class Box:
    """A mutable namespace, like a user's config object."""

    def __init__(self, **values: Any):
        self.__dict__.update(values)


# ---- state the global-reading patterns read (reset by each build) -------------------------------
SCALE = 2.0
CFG = Box(scale=2.0, inner=Box(k=1.0))
FLAGS = {"on": True}
WEIGHTS = [1.0, 2.0]
TABLE = {"a": 1.0, "b": 2.0}
BIG = list(range(1000))
DEEP = {"a": {"b": {"c": {"d": {"e": 1.0}}}}}
ARR_SMALL = np.array([1.0, 2.0, 3.0], dtype=np.float32)
ARR_BIG = np.ones(5000, dtype=np.float32)
T_GLOBAL = kiln.tensor(0.5)
LOG: list = []
NAMES = ["scale"]
MODE = "double"
COUNTER = 0


def helper(x):
    return x * SCALE


def helper_caller(x):
    return helper(x) + 1.0


# ---- class: globals, closures, defaults (guarded since the first JIT) ---------------------------
@pattern("global float", "plain reads", "guard")
def _():
    global SCALE
    SCALE = 2.0

    def f(x):
        return x * SCALE

    def change():
        global SCALE
        SCALE = 3.0
    return Case(f, (x3(),), change)


@pattern("global str selects a branch", "plain reads", "guard")
def _():
    global MODE
    MODE = "double"

    def f(x):
        return x * 2 if MODE == "double" else x * 3

    def change():
        global MODE
        MODE = "triple"
    return Case(f, (x3(),), change)


@pattern("closure float", "plain reads", "guard")
def _():
    cell = {"v": 2.0}
    scale = 2.0

    def f(x):
        return x * scale

    def change():
        nonlocal scale
        scale = 5.0
    del cell
    return Case(f, (x3(),), change)


@pattern("closure int used as a repeat count", "plain reads", "guard")
def _():
    n = 2

    def f(x):
        for _ in range(n):
            x = x * 2
        return x

    def change():
        nonlocal n
        n = 3
    return Case(f, (x3(),), change)


@pattern("config attribute", "plain reads", "guard")
def _():
    CFG.scale = 2.0

    def f(x):
        return x * CFG.scale
    return Case(f, (x3(),), lambda: setattr(CFG, "scale", 4.0))


@pattern("nested config attribute", "plain reads", "guard")
def _():
    CFG.inner.k = 1.0

    def f(x):
        return x + CFG.inner.k
    return Case(f, (x3(),), lambda: setattr(CFG.inner, "k", 7.0))


@pattern("config object rebound", "plain reads", "guard")
def _():
    global CFG
    CFG = Box(scale=2.0, inner=Box(k=1.0))

    def f(x):
        return x * CFG.scale

    def change():
        global CFG
        CFG = Box(scale=9.0, inner=Box(k=1.0))
    return Case(f, (x3(),), change)


@pattern("dict item with a constant key", "plain reads", "guard")
def _():
    FLAGS["on"] = True

    def f(x):
        return x * 2 if FLAGS["on"] else x
    return Case(f, (x3(),), lambda: FLAGS.__setitem__("on", False))


@pattern("list item with a constant index", "plain reads", "guard")
def _():
    WEIGHTS[:] = [1.0, 2.0]

    def f(x):
        return x * WEIGHTS[1]
    return Case(f, (x3(),), lambda: WEIGHTS.__setitem__(1, 5.0))


@pattern("default argument", "plain reads", "guard")
def _():
    def f(x, k=2.0):
        return x * k

    def change():
        f.__defaults__ = (3.0,)
    return Case(f, (x3(),), change)


@pattern("keyword-only default", "plain reads", "guard")
def _():
    def f(x, *, k=2.0):
        return x * k

    def change():
        f.__kwdefaults__ = {"k": 6.0}
    return Case(f, (x3(),), change)


@pattern("helper function reads a global", "plain reads", "guard")
def _():
    global SCALE
    SCALE = 2.0

    def f(x):
        return helper_caller(x)

    def change():
        global SCALE
        SCALE = 8.0
    return Case(f, (x3(),), change)


@pattern("helper function rebound", "plain reads", "guard")
def _():
    ops = Box(act=lambda t: t * 2)

    def f(x):
        return ops.act(x)
    return Case(f, (x3(),), lambda: setattr(ops, "act", lambda t: t * 3))


@pattern("small NumPy array mutated in place", "plain reads", "guard")
def _():
    ARR_SMALL[:] = [1.0, 2.0, 3.0]

    def f(x):
        return x * kiln.tensor(ARR_SMALL)
    return Case(f, (x3(),), lambda: ARR_SMALL.__setitem__(0, 10.0))


@pattern("tuple of floats rebound", "plain reads", "guard")
def _():
    coefs = (1.0, 2.0)

    def f(x):
        return x * coefs[0] + coefs[1]

    def change():
        nonlocal coefs
        coefs = (3.0, 4.0)
    return Case(f, (x3(),), change)


@pattern("instance attribute of a callable object", "plain reads", "guard")
def _():
    class Scaler:
        def __init__(self):
            self.k = 2.0

        def __call__(self, x):
            return x * self.k
    s = Scaler()
    return Case(s, (x3(),), lambda: setattr(s, "k", 3.0))


@pattern("set membership", "plain reads", "guard")
def _():
    enabled = {"relu"}

    def f(x):
        return x.relu() if "relu" in enabled else x
    return Case(f, (x3(),), lambda: enabled.discard("relu"))


# ---- class: modules -----------------------------------------------------------------------------
class Scaled(kiln.nn.Module):
    K = 2.0

    def __init__(self):
        super().__init__()
        self.lin = kiln.nn.Linear(3, 3)
        self.scale = 2.0
        self.extra = kiln.tensor(1.0)

    def forward(self, x):
        return self.lin(x) * self.scale


@pattern("module scalar attribute", "modules", "guard")
def _():
    m = Scaled()
    return Case(m, (x3(),), lambda: setattr(m, "scale", 3.0))


@pattern("module training mode (dropout)", "modules", "guard")
def _():
    m = kiln.nn.Sequential(kiln.nn.Linear(3, 3), kiln.nn.Dropout(0.0), kiln.nn.BatchNorm1d(3))
    return Case(m, (kiln.randn(4, 3),), lambda: m.eval())


@pattern("module class attribute via type(self)", "modules", "guard")
def _():
    class M(Scaled):
        K = 2.0

        def forward(self, x):
            return self.lin(x) * type(self).K
    m = M()
    return Case(m, (x3(),), lambda: setattr(M, "K", 4.0))


@pattern("module class attribute via self.__class__", "modules", "guard")
def _():
    class M(Scaled):
        K = 2.0

        def forward(self, x):
            return self.lin(x) * self.__class__.K
    m = M()
    return Case(m, (x3(),), lambda: setattr(M, "K", 5.0))


@pattern("super().forward reads a parent's attribute", "modules", "guard")
def _():
    class Base(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = Box(k=2.0)

        def forward(self, x):
            return x * self.cfg.k

    class Child(Base):
        def forward(self, x):
            return super().forward(x) + 1.0
    m = Child()
    return Case(m, (x3(),), lambda: setattr(m.cfg, "k", 3.0))


@pattern("static method reads a global", "modules", "guard")
def _():
    global SCALE
    SCALE = 2.0

    class M(kiln.nn.Module):
        @staticmethod
        def scale(x):
            return x * SCALE

        def forward(self, x):
            return M.scale(x)

    def change():
        global SCALE
        SCALE = 4.0
    return Case(M(), (x3(),), change)


@pattern("class method reads a class attribute", "modules", "guard")
def _():
    class M(kiln.nn.Module):
        K = 2.0

        @classmethod
        def scale(cls, x):
            return x * cls.K

        def forward(self, x):
            return self.scale(x)
    return Case(M(), (x3(),), lambda: setattr(M, "K", 3.0))


@pattern("submodule replaced", "modules", "guard")
def _():
    m = kiln.nn.Sequential(kiln.nn.Linear(3, 3), kiln.nn.ReLU())
    return Case(m, (x3(),), lambda: m.__setitem__(1, kiln.nn.Tanh()) if hasattr(m, "__setitem__")
                else setattr(m, "1", kiln.nn.Tanh()))


@pattern("parameter replaced", "modules", "guard")
def _():
    m = kiln.nn.Linear(3, 2)
    return Case(m, (x3(),), lambda: setattr(m, "weight", kiln.nn.Parameter(kiln.ones(2, 3))))


@pattern("parameter updated in place (optimizer step)", "modules", "guard")
def _():
    m = kiln.nn.Linear(3, 2)

    def change():
        with kiln.no_grad():
            m.weight.mul_(2.0)
    return Case(m, (x3(),), change)


@pattern("a global module's training mode, from a function", "modules", "guard")
def _():
    m = kiln.nn.Sequential(kiln.nn.Linear(3, 3), kiln.nn.BatchNorm1d(3))

    def f(x):
        return m(x)
    return Case(f, (kiln.randn(4, 3),), lambda: m.eval())


@pattern("forward hook reads a closure", "modules", "guard")
def _():
    state = Box(k=1.0)
    m = kiln.nn.Sequential(kiln.nn.Linear(3, 3))
    m[0].register_forward_hook(lambda mod, inp, out: out * state.k)
    return Case(m, (x3(),), lambda: setattr(state, "k", 2.0))


def _hooked_step(register: Callable[[kiln.nn.Linear, Box], Any]) -> tuple[Callable, Callable]:
    """A whole training step whose parameter has a gradient hook reading `state.k`, and its eager twin."""
    def build() -> tuple[Callable, Any]:
        kiln.manual_seed(0)
        m = kiln.nn.Linear(3, 2)
        opt = kiln.optim.SGD(m.parameters(), lr=0.1)
        state = Box(k=1.0)
        register(m, state)

        def step(x):
            opt.zero_grad()
            m(x).pow(2).sum().backward()
            opt.step()
            return m.weight * 1.0
        return step, state
    return build


@pattern("gradient hook on a parameter reads a closure (whole step)", "modules", "guard")
def _():
    build = _hooked_step(lambda m, state: m.weight.register_hook(lambda g: g * state.k))
    step, state = build()
    twin, twin_state = build()
    return Case(step, (x3(),), lambda: (setattr(state, "k", 0.5), setattr(twin_state, "k", 0.5)), eager=twin)


@pattern("post-accumulate-grad hook reads a closure (whole step)", "modules", "guard")
def _():
    build = _hooked_step(lambda m, state: m.bias.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(state.k)))
    step, state = build()
    twin, twin_state = build()
    return Case(step, (x3(),), lambda: (setattr(state, "k", 0.5), setattr(twin_state, "k", 0.5)), eager=twin)


@pattern("gradient hook registered after compiling (whole step)", "modules", "guard")
def _():
    build = _hooked_step(lambda m, state: setattr(state, "m", m))
    step, state = build()
    twin, twin_state = build()

    def change():
        for s in (state, twin_state):
            s.m.weight.register_hook(lambda g: g * 0.25)
    return Case(step, (x3(),), change, eager=twin)


# ---- class 3: a bound method of a module --------------------------------------------------------
@pattern("compile(model.forward): training mode", "bound methods", "guard")
def _():
    m = kiln.nn.Sequential(kiln.nn.Linear(3, 3), kiln.nn.BatchNorm1d(3))
    return Case(m.forward, (kiln.randn(4, 3),), lambda: m.eval())


@pattern("compile(model.forward): kiln's own Dropout", "bound methods", "guard")
def _():
    m = kiln.nn.Dropout(0.5)
    return Case(m.forward, (kiln.ones(64),), lambda: m.eval())


@pattern("compile(model.forward): kiln's own BatchNorm", "bound methods", "guard")
def _():
    m = kiln.nn.BatchNorm1d(3)
    return Case(m.forward, (kiln.randn(4, 3),), lambda: m.eval())


@pattern("compile(model.forward): parameter replaced", "bound methods", "guard")
def _():
    m = kiln.nn.Linear(3, 2)
    return Case(m.forward, (x3(),), lambda: setattr(m, "weight", kiln.nn.Parameter(kiln.ones(2, 3))))


@pattern("compile(model.forward): scalar attribute", "bound methods", "guard")
def _():
    m = Scaled()
    return Case(m.forward, (x3(),), lambda: setattr(m, "scale", 5.0))


# ---- class 1: outside tensors turned into Python values ------------------------------------------
def _set(t: kiln.Tensor, value: float) -> None:
    with kiln.no_grad():
        t.fill_(value)


@pattern("global tensor .item()", "outside tensors", "guard")
def _():
    _set(T_GLOBAL, 0.5)

    def f(x):
        return x * T_GLOBAL.item()
    return Case(f, (x3(),), lambda: _set(T_GLOBAL, 2.5))


@pattern("closure tensor float()", "outside tensors", "guard")
def _():
    t = kiln.tensor(0.5)

    def f(x):
        return x * float(t)
    return Case(f, (x3(),), lambda: _set(t, -1.5))


@pattern("closure tensor int()", "outside tensors", "guard")
def _():
    t = kiln.tensor(2)

    def f(x):
        return x * int(t)
    return Case(f, (x3(),), lambda: t.fill_(5))


@pattern("closure tensor in `if t:`", "outside tensors", "guard")
def _():
    t = kiln.tensor(True)

    def f(x):
        return x * 2 if t else x * 3
    return Case(f, (x3(),), lambda: t.fill_(False))


@pattern("closure tensor compared in `if` (the comparison is traced)", "outside tensors", "branch")
def _():
    t = kiln.tensor(0.5)

    def f(x):
        return x * 2 if t > 0 else x * 3
    return Case(f, (x3(),), lambda: _set(t, -1.0))


@pattern("closure tensor as an index", "outside tensors", "guard")
def _():
    t = kiln.tensor(0)

    def f(x):
        return x[t] * 2
    return Case(f, (x3(),), lambda: t.fill_(2))


@pattern("closure tensor .tolist()", "outside tensors", "guard")
def _():
    t = kiln.tensor([1.0, 2.0])

    def f(x):
        a, b = t.tolist()
        return x * a + b
    return Case(f, (x3(),), lambda: _set(t, 4.0))


@pattern("module attribute tensor .item()", "outside tensors", "guard")
def _():
    m = Scaled()

    class M(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = kiln.tensor(2.0)

        def forward(self, x):
            return x * self.k.item()
    m = M()
    return Case(m, (x3(),), lambda: _set(m.k, 3.0))


@pattern("global tensor rebound", "outside tensors", "guard")
def _():
    global T_GLOBAL
    T_GLOBAL = kiln.tensor(0.5)

    def f(x):
        return x * T_GLOBAL.item()

    def change():
        global T_GLOBAL
        T_GLOBAL = kiln.tensor(1.5)
    return Case(f, (x3(),), change)


@pattern("captured tensor used in ops (read fresh)", "outside tensors", "guard")
def _():
    t = kiln.tensor([1.0, 2.0, 3.0])

    def f(x):
        return x * t
    return Case(f, (x3(),), lambda: _set(t, 9.0))


@pattern("traced tensor turned into a Python bool", "outside tensors", "branch")
def _():
    def f(x):
        return x * 2 if x.sum() > 0 else x * 3
    return Case(f, (x3(),), lambda: None)


# ---- class 2: reads the analysis cannot follow, or follows specially ------------------------------
@pattern("property of a config object", "unfollowed reads", "warn", match="cfg.scale")
def _():
    class Cfg:
        def __init__(self):
            self._s = 2.0

        @property
        def scale(self):
            return self._s
    cfg = Cfg()

    def f(x):
        return x * cfg.scale
    return Case(f, (x3(),), lambda: setattr(cfg, "_s", 3.0))


@pattern("custom descriptor", "unfollowed reads", "warn", match="cfg.scale")
def _():
    class Twice:
        def __get__(self, obj, objtype=None):
            return obj.base * 2

        def __set__(self, obj, value):
            raise AttributeError

    class Cfg:
        scale = Twice()

        def __init__(self):
            self.base = 1.0
    cfg = Cfg()

    def f(x):
        return x * cfg.scale
    return Case(f, (x3(),), lambda: setattr(cfg, "base", 4.0))


@pattern("module property", "unfollowed reads", "warn", match="self.factor")
def _():
    class M(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self._f = 2.0

        @property
        def factor(self):
            return self._f

        def forward(self, x):
            return x * self.factor
    m = M()
    return Case(m, (x3(),), lambda: setattr(m, "_f", 3.0))


@pattern("getattr with a constant name", "unfollowed reads", "guard")
def _():
    cfg = Box(scale=2.0)

    def f(x):
        return x * getattr(cfg, "scale")
    return Case(f, (x3(),), lambda: setattr(cfg, "scale", 3.0))


@pattern("getattr with a computed name", "unfollowed reads", "guard")
def _():
    cfg = Box(scale=2.0)
    names = ["scale"]

    def f(x):
        return x * getattr(cfg, names[0])
    return Case(f, (x3(),), lambda: setattr(cfg, "scale", 3.0))


@pattern("vars(obj)[name]", "unfollowed reads", "guard")
def _():
    cfg = Box(scale=2.0)

    def f(x):
        return x * vars(cfg)["scale"]
    return Case(f, (x3(),), lambda: setattr(cfg, "scale", 3.0))


@pattern("obj.__dict__[name]", "unfollowed reads", "guard")
def _():
    cfg = Box(scale=2.0)

    def f(x):
        return x * cfg.__dict__["scale"]
    return Case(f, (x3(),), lambda: setattr(cfg, "scale", 3.0))


@pattern("dict lookup with a computed key", "unfollowed reads", "guard")
def _():
    TABLE["a"] = 1.0
    key = "a"

    def f(x):
        return x * TABLE[key]
    return Case(f, (x3(),), lambda: TABLE.__setitem__("a", 4.0))


@pattern("function found by a computed key reads a global", "unfollowed reads", "guard")
def _():
    global SCALE
    SCALE = 2.0
    key = "scaled"

    def scaled(x):
        return x * SCALE

    table = {"scaled": scaled, "neg": lambda x: -x}

    def f(x):
        return table[key](x)

    def change():
        global SCALE
        SCALE = 3.0
    return Case(f, (x3(),), change)


@pattern("list lookup with a computed index", "unfollowed reads", "guard")
def _():
    WEIGHTS[:] = [1.0, 2.0]

    def f(x, i=1):
        return x * WEIGHTS[i - 1]
    return Case(f, (x3(),), lambda: WEIGHTS.__setitem__(0, 6.0))


@pattern("dict.get with a constant key", "unfollowed reads", "guard")
def _():
    TABLE["b"] = 2.0

    def f(x):
        return x * TABLE.get("b", 1.0)
    return Case(f, (x3(),), lambda: TABLE.__setitem__("b", 5.0))


@pattern("nested dict read whole", "unfollowed reads", "guard")
def _():
    cfg = {"opt": {"scale": 2.0}}

    def f(x):
        return x * cfg["opt"]["scale"]
    return Case(f, (x3(),), lambda: cfg["opt"].__setitem__("scale", 3.0))


@pattern("container too large for content keys", "unfollowed reads", "warn", match="BIG")
def _():
    BIG[:] = list(range(1000))

    def f(x):
        return x * BIG[int(x.shape[0])]
    return Case(f, (x3(),), lambda: BIG.__setitem__(3, -1))


@pattern("container nested too deeply", "unfollowed reads", "warn", match="DEEP")
def _():
    DEEP["a"]["b"]["c"]["d"]["e"] = 1.0
    path = ["a", "b", "c", "d", "e"]

    def f(x):
        node = DEEP
        for p in path:
            node = node[p]
        return x * node
    return Case(f, (x3(),), lambda: DEEP["a"]["b"]["c"]["d"].__setitem__("e", 2.0))


@pattern("large NumPy array", "unfollowed reads", "warn", match="ARR_BIG")
def _():
    ARR_BIG[:] = 1.0

    def f(x):
        return x * float(ARR_BIG.sum())
    return Case(f, (x3(),), lambda: ARR_BIG.__setitem__(0, 100.0))


@pattern("functools.partial keyword", "unfollowed reads", "guard")
def _():
    def scaled(x, k):
        return x * k
    p = functools.partial(scaled, k=2.0)
    return Case(p, (x3(),), lambda: p.keywords.__setitem__("k", 3.0))


@pattern("functools.partial held in a global-like object", "unfollowed reads", "guard")
def _():
    def scaled(x, k):
        return x * k
    ops = Box(fn=functools.partial(scaled, k=2.0))

    def f(x):
        return ops.fn(x)
    return Case(f, (x3(),), lambda: setattr(ops, "fn", functools.partial(scaled, k=5.0)))


@pattern("os.environ[KEY]", "unfollowed reads", "guard")
def _():
    os.environ["KILN_TEST_GUARD_MODE"] = "a"

    def f(x):
        return x * 2 if os.environ["KILN_TEST_GUARD_MODE"] == "a" else x * 3
    return Case(f, (x3(),), lambda: os.environ.__setitem__("KILN_TEST_GUARD_MODE", "b"))


@pattern("os.environ.get(KEY)", "unfollowed reads", "guard")
def _():
    os.environ.pop("KILN_TEST_GUARD_FLAG", None)

    def f(x):
        return x * 2 if os.environ.get("KILN_TEST_GUARD_FLAG") else x * 3
    return Case(f, (x3(),), lambda: os.environ.__setitem__("KILN_TEST_GUARD_FLAG", "1"))


@pattern("os.getenv(KEY)", "unfollowed reads", "guard")
def _():
    os.environ["KILN_TEST_GUARD_GETENV"] = "2"

    def f(x):
        return x * float(os.getenv("KILN_TEST_GUARD_GETENV", "1"))
    return Case(f, (x3(),), lambda: os.environ.__setitem__("KILN_TEST_GUARD_GETENV", "4"))


@pattern("random.random()", "unfollowed reads", "warn", match="random.random")
def _():
    def f(x):
        return x * 0 + random.random() * 0 + x
    return Case(f, (x3(),))


@pattern("time.time()", "unfollowed reads", "warn", match="time.time")
def _():
    def f(x):
        return x + 0 * time.time()
    return Case(f, (x3(),))


@pattern("np.random.rand()", "unfollowed reads", "warn", match="np.random.rand")
def _():
    def f(x):
        return x + 0 * float(np.random.rand())
    return Case(f, (x3(),))


# ---- class 6: Python side effects ---------------------------------------------------------------
@pattern("list.append on a global", "side effects", "warn", match="LOG.append")
def _():
    LOG.clear()

    def f(x):
        LOG.append(1)
        return x * 2
    return Case(f, (x3(),), eager=lambda x: x * 2)


@pattern("print()", "side effects", "warn", match="print")
def _():
    def f(x):
        print("tracing", end="")
        return x * 2
    return Case(f, (x3(),), eager=lambda x: x * 2)


@pattern("attribute store on self", "side effects", "warn", match="self.calls")
def _():
    class M(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x * 2
    return Case(M(), (x3(),), eager=lambda x: x * 2)


@pattern("global counter", "side effects", "warn", match="COUNTER")
def _():
    def f(x):
        global COUNTER
        COUNTER += 1
        return x * 2
    return Case(f, (x3(),), eager=lambda x: x * 2)


@pattern("item store into a closure dict", "side effects", "warn", match="seen[...]")
def _():
    seen: dict = {}

    def f(x):
        seen["last"] = 1
        return x * 2
    return Case(f, (x3(),), eager=lambda x: x * 2)


@pattern("nonlocal write", "side effects", "warn", match="nonlocal calls")
def _():
    calls = 0

    def f(x):
        nonlocal calls
        calls += 1
        return x * 2
    return Case(f, (x3(),), eager=lambda x: x * 2)


@pattern("append to a list argument", "side effects", "warn", match="acc.append")
def _():
    def f(x, acc):
        acc.append(1)
        return x * 2
    acc: list = []
    return Case(f, (x3(), acc), eager=lambda x, acc: x * 2)


# ---- class 5: random state inside the function ---------------------------------------------------
@pattern("kiln.manual_seed inside", "random state", "eager", match="manual_seed")
def _():
    def f(x):
        kiln.manual_seed(0)
        return x + kiln.rand(3)
    return Case(f, (x3(),))


@pattern("a new Generator inside", "random state", "eager", match="Generator")
def _():
    def f(x):
        g = kiln.Generator().manual_seed(1)
        return x + kiln.rand(3, generator=g)
    return Case(f, (x3(),))


@pattern("an outside Generator (not a break)", "random state", "guard")
def _():
    g = kiln.Generator().manual_seed(3)

    def f(x):
        return x + kiln.rand(3, generator=g)
    return Case(f, (x3(),))


# ---- class 4: dynamic_dims sizes turned into Python numbers ---------------------------------------
def _batch_case(f: Callable) -> Case:
    case = Case(f, (kiln.randn(4, 3),))
    case.mutate = lambda: setattr(case, "args", (kiln.randn(6, 3),))
    return case


_B = {"dynamic_dims": {0: {0: "B"}}}


@pattern("int(B) of a dynamic size", "dynamic sizes", "specialize", match="int(", **_B)
def _():
    return _batch_case(lambda x: x * int(x.shape[0]))


@pattern("math.sqrt(B)", "dynamic sizes", "specialize", match="float(", **_B)
def _():
    import math
    return _batch_case(lambda x: x / math.sqrt(x.shape[0]))


@pattern("f-string of B", "dynamic sizes", "specialize", match="format", **_B)
def _():
    return _batch_case(lambda x: x * len(f"{x.shape[0]}"))


@pattern("np.prod(x.shape)", "dynamic sizes", "specialize", match="NumPy reading", **_B)
def _():
    return _batch_case(lambda x: x / float(np.prod(x.shape)))


@pattern("range(B)", "dynamic sizes", "specialize", match="index or count", **_B)
def _():
    return _batch_case(lambda x: x * sum(range(x.shape[0])))


@pattern("np.zeros((B, 1))", "dynamic sizes", "specialize", match="index or count", **_B)
def _():
    return _batch_case(lambda x: x + kiln.tensor(np.full((x.shape[0], 1), 0.5, np.float32)))


@pattern("a Python list sliced with B", "dynamic sizes", "specialize", match="index or count", **_B)
def _():
    return _batch_case(lambda x: x * float(sum([0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5][:x.shape[0]])))


@pattern("math.log(B)", "dynamic sizes", "specialize", match="float(", **_B)
def _():
    import math
    return _batch_case(lambda x: x * math.log(x.shape[0]))


@pattern("'%d' % B", "dynamic sizes", "specialize", match="int(", **_B)
def _():
    return _batch_case(lambda x: x * len("%d" % (x.shape[0] * 1000)))


@pattern("len(x)", "dynamic sizes", "specialize", match="int(", **_B)
def _():
    return _batch_case(lambda x: x.sum(0) / len(x))


@pattern("a returned size is the call's size", "dynamic sizes", "guard", **_B)
def _():
    return _batch_case(lambda x: (x * 2, x.shape[0]))


@pattern("symbolic arithmetic on B stays symbolic", "dynamic sizes", "guard", **_B)
def _():
    return _batch_case(lambda x: x.reshape(x.shape[0] * 3) / (x.shape[0] * 3))


# ---- tests --------------------------------------------------------------------------------------
def _close(a: Any, b: Any) -> None:
    if isinstance(a, kiln.Tensor):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)
    elif isinstance(a, (tuple, list)):
        for x, y in zip(a, b):
            _close(x, y)
    else:
        assert a == b


def _kiln_warnings(record: list) -> list[str]:
    return [str(w.message) for w in record if "kiln.compile" in str(w.message) or "dynamic_dims" in str(w.message)]


def _run_pair(compiled: Any, case: Case, eager: Callable, rng_state: tuple | None) -> None:
    """One call compiled and the same call eagerly, with the same RNG state, compared."""
    state = kiln.random.get_rng_state() if hasattr(kiln.random, "get_rng_state") else None
    generators = _generators(case)
    saved = [(g, g.get_state()) for g in generators]
    out = compiled(*case.args)
    if state is not None:
        after = kiln.random.get_rng_state()
        kiln.random.set_rng_state(state)
    for g, s in saved:
        g.set_state(s)
    expected = eager(*case.args)
    _close(out, expected)
    if state is not None:
        assert kiln.random.get_rng_state() == after, "compiled and eager drew different amounts of randomness"


def _generators(case: Case) -> list:
    fn = case.target
    cells = getattr(fn, "__closure__", None) or ()
    found = []
    for c in cells:
        try:
            v = c.cell_contents
        except ValueError:
            continue
        if isinstance(v, kiln.Generator):
            found.append(v)
    return found


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("p", PATTERNS, ids=[p.name for p in PATTERNS])
def test_pattern_guards_or_warns(p: Pattern, backend: str) -> None:
    from kiln.jit import trace as trace_module

    trace_module._SPECIALIZED_SITES.clear()  # specialization warnings are once per process and site
    case = p.build()
    eager = case.eager or case.target
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        compiled = kiln.compile(case.target, backend=backend, **p.options)
        kiln.manual_seed(0)
        for _ in range(2):
            _run_pair(compiled, case, eager, None)
        first = _kiln_warnings(record)
        case.mutate()
        for _ in range(2):
            if p.expect == "warn":  # the warning said the change is not seen
                compiled(*case.args)
            else:
                _run_pair(compiled, case, eager, None)
        later = _kiln_warnings(record)[len(first):]
    if p.expect in ("guard", "branch"):
        assert not first and not later, first + later
        assert p.expect == "guard" or compiled.stats.fallbacks == 0
    elif p.expect == "warn":
        assert len(first) == 1 or all(p.match in w for w in first), first
        assert any(p.match in w and "Fix:" in w for w in first), first
        assert not later, later  # once
    elif p.expect == "specialize":  # a shape guard retraces at the new size; one warning said so
        assert len(first) == 1 and p.match in first[0] and "Fix" in first[0], first
        assert compiled.stats.misses >= 2 and not later, later
    else:  # eager fallback
        assert compiled.stats.fallbacks >= 1
        assert any(p.match in w for w in first), first


@pytest.mark.parametrize("p", [p for p in PATTERNS if p.expect in ("warn", "eager", "branch")],
                         ids=[p.name for p in PATTERNS if p.expect in ("warn", "eager", "branch")])
def test_pattern_is_a_graph_break_with_fullgraph(p: Pattern) -> None:
    case = p.build()
    compiled = kiln.compile(case.target, fullgraph=True, backend="interpret")
    with pytest.raises(GraphBreakError, match="Fix"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(*case.args)


def test_the_table_is_large_and_covers_every_class() -> None:
    assert len(PATTERNS) >= 60
    classes = {p.cls for p in PATTERNS}
    assert {"plain reads", "modules", "bound methods", "outside tensors", "unfollowed reads", "side effects",
            "random state", "dynamic sizes"} <= classes


_DOC_TREATMENT = {"guard": "guarded", "warn": "one-time warning", "eager": "falls back to eager",
                  "specialize": "specialized", "branch": "a plan per path"}


def test_docs_table_lists_every_pattern_with_its_treatment() -> None:
    """docs/guards.md is the user's copy of this table: every row, with the same treatment."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "guards.md").read_text()
    rows = {line.split("|")[2].strip(): line.split("|")[3] for line in doc.splitlines()
            if line.startswith("| ") and line.count("|") == 4}
    for p in PATTERNS:
        assert p.name in rows, f"docs/guards.md lacks the row {p.name!r}"
        assert _DOC_TREATMENT[p.expect] in rows[p.name], (p.name, rows[p.name])


def test_a_growing_container_warns_when_it_outgrows_content_keys(monkeypatch) -> None:
    """A list guarded by content that keeps growing must not flip silently to 'frozen' when it
    gets too large to key by content: kiln warns at that moment."""
    from kiln.jit import chain_values

    monkeypatch.setattr(chain_values, "CONTENT_LIMIT", 20)  # the same logic as at 256, in fewer steps
    history: list = []

    def f(x):
        return x * len(history)

    compiled = kiln.compile(f, backend="interpret", max_cache_entries=100)
    x = x3()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for step in range(40):
            history.append(step)
            _close(compiled(x), f(x))  # up to the limit, each change retraces and equals eager
            if _kiln_warnings(record):
                break
    messages = [m for m in _kiln_warnings(record) if "history" in m]
    assert messages and "too large" in messages[0] and "Fix:" in messages[0]
    assert len(history) == 21  # it was keyed by content (and retraced) until then
    assert compiled.stats.misses == 21


def test_module_functions_named_like_mutators_are_not_side_effects() -> None:
    """`kiln.add(x, y)`, `kiln.sort(x)`, `np.sort(a)` call a module's function; only a container's
    `append`/`add`/`sort`... is a side effect. No warning, and fullgraph compiles."""
    def f(x):
        values, _ = kiln.sort(x)
        return kiln.add(values, float(np.sort(np.array([2.0, 1.0]))[0]))

    compiled = kiln.compile(f, fullgraph=True, backend="interpret")
    x = x3()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(compiled(x).numpy(), f(x).numpy())


def test_a_container_mutator_is_still_a_side_effect() -> None:
    seen: set = set()

    def f(x):
        seen.add(1)
        return x + 1

    with pytest.raises(GraphBreakError, match=r"seen\.add"):
        kiln.compile(f, fullgraph=True, backend="interpret")(x3())
