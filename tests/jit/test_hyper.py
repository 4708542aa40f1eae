"""Hyperparameters in compiled code (kiln.jit.hyper): expressions evaluated per call, guards on
branches, exact guards on conversions, and param_groups as plain dicts outside a trace."""
from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest

import kiln
from kiln.jit.hyper import HyperScalar, evaluate, expr_text, sqrt
from kiln.jit.trace import Tracer
from kiln.optim.param_group import ParamGroup

pytestmark = pytest.mark.filterwarnings("error")


def test_arithmetic_builds_expressions_that_evaluate_like_python() -> None:
    lr, beta = HyperScalar(0.1, ("src", 0)), HyperScalar(0.9, ("src", 1))
    exprs = [-lr, 1.0 - beta, lr * 0.01, lr / (1 - beta ** 3), sqrt(1 - beta ** 2.0), abs(-lr), 2 ** beta,
             beta // 0.5, beta % 0.5]
    plain = [lambda a, b: -a, lambda a, b: 1.0 - b, lambda a, b: a * 0.01, lambda a, b: a / (1 - b ** 3),
             lambda a, b: math.sqrt(1 - b ** 2.0), lambda a, b: abs(-a), lambda a, b: 2 ** b,
             lambda a, b: b // 0.5, lambda a, b: b % 0.5]
    for env in ([0.1, 0.9], [0.37, 0.999], [1e-5, 0.5]):
        for h, fn in zip(exprs, plain):
            assert evaluate(h.expr, env) == fn(*env)  # bit for bit: the same Python float operations
    assert [h.value for h in exprs] == [fn(0.1, 0.9) for fn in plain]
    assert expr_text((-lr).expr, ["lr"]) == "-lr"
    assert expr_text((1.0 - beta).expr, ["lr", "b"]) == "(1.0 - b)"


def test_branches_record_guards_and_conversions_guard_the_value() -> None:
    with Tracer() as tracer:
        capture = tracer.step_capture()
        m = HyperScalar(0.9, ("src", 0))
        assert m != 0 and m > 0.5 and bool(m) and not (m < 0)
        assert float(m) == 0.9 and f"{m:.1f}" == "0.9"
    guards = list(capture.hyper_guards.values())
    assert (("!=", ("src", 0), ("num", 0)), True) in guards
    assert ((">", ("src", 0), ("num", 0.5)), True) in guards
    assert (("<", ("src", 0), ("num", 0)), False) in guards
    assert (("==", ("src", 0), ("num", 0.9)), True) in guards  # float(m) pins the exact value
    assert all(evaluate(e, [0.7]) == r for e, r in guards if e[0] != "==")  # 0.7: same branches...
    assert evaluate(("==", ("src", 0), ("num", 0.9)), [0.7]) is False  # ...but not the pinned value


def test_a_hyperparameter_operand_becomes_a_plan_input() -> None:
    w = kiln.ones(3, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.1)

    @kiln.compile
    def scaled(x):
        return x * opt.param_groups[0]["lr"] + (1 - opt.param_groups[0]["lr"])

    x = kiln.ones(3)
    for lr in (0.1, 0.5, 0.25):
        opt.param_groups[0]["lr"] = lr
        np.testing.assert_allclose(scaled(x).numpy(), np.full(3, lr + (1 - lr)), rtol=1e-7)
    assert scaled.stats.traces == 1
    graph = scaled.graphs()[-1]
    kinds = [s.kind for s in graph.specs]
    assert kinds.count("hyper") == 2 and all(n.prim.name != "full" for n in graph.nodes)


def test_a_hyperparameter_turned_into_a_python_number_retraces_when_it_changes() -> None:
    w = kiln.ones(3, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.1)

    @kiln.compile
    def scaled(x):
        return x * float(opt.param_groups[0]["lr"])

    x = kiln.ones(3)
    assert scaled(x).numpy()[0] == np.float32(0.1)
    assert scaled(x).numpy()[0] == np.float32(0.1)
    opt.param_groups[0]["lr"] = 0.5
    assert scaled(x).numpy()[0] == np.float32(0.5)
    assert scaled.stats.traces == 2 and scaled.stats.hits == 1


def test_param_groups_are_plain_dicts_outside_a_trace() -> None:
    w = kiln.ones(2, requires_grad=True)
    opt = kiln.optim.Adam([w], lr=0.1)
    group = opt.param_groups[0]
    assert isinstance(group, ParamGroup) and isinstance(group, dict) and group.optimizer is opt
    assert group["lr"] == 0.1 and group.get("betas") == (0.9, 0.999) and group.get("missing", 3) == 3
    group["lr"] = 0.2
    assert opt.state_dict()["param_groups"][0]["lr"] == 0.2
    copied = copy.deepcopy(group)
    assert copied.optimizer is None and copied["lr"] == 0.2  # a copy holds options, not the optimizer
    assert copied["params"][0] is not w and sorted(copied) == sorted(group)
    assert pickle.loads(pickle.dumps(ParamGroup({"lr": 0.3}))) == {"lr": 0.3}
    opt.load_state_dict(opt.state_dict())
    assert isinstance(opt.param_groups[0], ParamGroup) and opt.param_groups[0].optimizer is opt


def test_compiled_expressions_equal_evaluate() -> None:
    from kiln.jit.hyper import compile_expr

    lr, b1, b2, step = (HyperScalar(v, ("src", i)) for i, v in enumerate((0.1, 0.9, 0.999, 3.0)))
    exprs = [(-lr / (1.0 - b1 ** (step + 1))).expr, sqrt(1.0 - b2 ** step).expr, abs(-lr).expr,
             (lr * 0.5 // 0.01 % 3).expr, ("==", ("src", 0), ("num", "a string"))]
    for env in ([0.1, 0.9, 0.999, 3.0], [0.37, 0.5, 0.25, 99.0]):
        for e in exprs:
            assert compile_expr(e)(env) == evaluate(e, env)


def test_compiled_guards_hold_exactly_when_every_guard_evaluates_to_its_result() -> None:
    from kiln.jit.hyper import compile_guards

    guards = ((("!=", ("src", 0), ("num", 0)), True), (("==", ("src", 1), ("num", False)), True),
              (("<", ("-", ("num", 1.0), ("src", 2)), ("num", 0.5)), True), ((">=", ("src", 0), ("src", 2)), False))
    check = compile_guards(guards)
    envs = [[0.9, False, 0.999], [0.0, False, 0.999], [0.9, True, 0.999], [0.9, False, 0.2], [1.0, False, 0.999],
            [0.9, 0, 0.9]]
    for env in envs:
        want = all(evaluate(e, env) == r for e, r in guards)
        assert check(env) is want, env
    assert compile_guards(())([]) is True
    assert compile_guards(((("==", ("src", 0), ("num", "a string")), True),)) is None  # only evaluate can tell
