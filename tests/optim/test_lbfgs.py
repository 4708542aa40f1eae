"""kiln.optim.LBFGS follows torch.optim.LBFGS step for step (float64), with and without the strong
Wolfe line search; its state_dict round-trips; inside kiln.compile its step is a graph break."""
from __future__ import annotations

import copy
import importlib
import warnings

import numpy as np
import pytest

import kiln
import kiln.optim

torch = pytest.importorskip("torch")

TOL = dict(rtol=1e-9, atol=1e-11)
SEARCHES = [None, "strong_wolfe"]


def _least_squares(lib, params):
    w, b = params
    return ((lib.tensor(_DATA["x"]) @ w + b - lib.tensor(_DATA["y"])) ** 2).mean()


def _logistic(lib, params):
    w, b = params
    z = lib.tensor(_DATA["x"]) @ w[:, 0] + b[0]
    y = lib.tensor(_DATA["labels"])
    return (lib.log(1 + lib.exp(-z)) + (1 - y) * z).mean() + 1e-3 * (w ** 2).sum()


def _rosenbrock(lib, params):
    (x,) = params
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


_RNG = np.random.default_rng(0)
_DATA = {"x": _RNG.normal(size=(30, 4)), "y": _RNG.normal(size=(30, 2)), "labels": (_RNG.random(30) < 0.5) * 1.0}
PROBLEMS = {
    "least_squares": (_least_squares, lambda: [_RNG.normal(size=(4, 2)), np.zeros(2)]),
    "logistic": (_logistic, lambda: [_RNG.normal(size=(4, 1)), np.zeros(1)]),
    "rosenbrock": (_rosenbrock, lambda: [np.array([-1.5, 2.0, 0.5, -0.3])]),
}


def _run(lib, problem, start, steps, **options):
    """`steps` LBFGS steps from `start`: the final params, the losses step() returned, the optimizer."""
    params = [lib.tensor(a.copy(), requires_grad=True) for a in start]
    opt = lib.optim.LBFGS(params, **options)

    def closure():
        opt.zero_grad()
        loss = problem(lib, params)
        loss.backward()
        return loss

    losses = [opt.step(closure).item() for _ in range(steps)]
    return [p.detach().numpy().copy() for p in params], losses, opt


def _first_state(opt):
    return opt.state[opt.param_groups[0]["params"][0]]


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("name,options", [
    ("least_squares", dict()),
    ("least_squares", dict(lr=0.5, max_iter=4)),
    ("logistic", dict()),
    ("logistic", dict(history_size=2, max_iter=8)),
    ("logistic", dict(lr=0.3, max_eval=3)),
    ("rosenbrock", dict()),
    ("rosenbrock", dict(lr=0.1, history_size=3, max_eval=9)),
])
def test_trajectory_matches_torch(name, options, search):
    problem, init = PROBLEMS[name]
    start = init()
    got, got_losses, opt = _run(kiln, problem, start, 4, line_search_fn=search, **options)
    want, want_losses, topt = _run(torch, problem, start, 4, line_search_fn=search, **options)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL)
    np.testing.assert_allclose(got_losses, want_losses, **TOL)
    ours, theirs = _first_state(opt), _first_state(topt)
    assert (ours["func_evals"], ours["n_iter"]) == (theirs["func_evals"], theirs["n_iter"])
    assert len(ours["old_dirs"]) == len(theirs["old_dirs"])


def test_step_returns_the_first_loss_and_stops_at_a_minimum():
    start = [np.array([1.0, 1.0, 1.0])]  # the Rosenbrock minimum: the gradient is zero
    got, losses, opt = _run(kiln, _rosenbrock, start, 2)
    assert losses == [0.0, 0.0] and np.array_equal(got[0], start[0])
    assert _first_state(opt)["func_evals"] == 2 and _first_state(opt)["n_iter"] == 0


def test_a_parameter_without_gradient_counts_as_zero_gradient():
    def problem(lib, params):
        return ((params[0] - 3) ** 2).sum()

    start = [np.array([0.0, 1.0]), np.array([5.0])]
    got, _, _ = _run(kiln, problem, start, 2, line_search_fn="strong_wolfe")
    want, _, _ = _run(torch, problem, start, 2, line_search_fn="strong_wolfe")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL)


def test_state_dict_round_trip_continues_the_same_trajectory():
    problem, init = PROBLEMS["logistic"]
    start = init()
    options = dict(line_search_fn="strong_wolfe", max_iter=3, history_size=4)
    _, _, opt = _run(kiln, problem, start, 2, **options)
    params = opt.param_groups[0]["params"]
    saved = copy.deepcopy(opt.state_dict())
    assert set(saved["state"]) == {0}
    assert {"d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss", "func_evals",
            "n_iter"} <= set(saved["state"][0])

    twin = [kiln.tensor(p.detach().numpy().copy(), requires_grad=True) for p in params]
    opt2 = kiln.optim.LBFGS(twin, **options)
    opt2.load_state_dict(saved)
    for o, ps in ((opt, params), (opt2, twin)):
        def closure(o=o, ps=ps):
            o.zero_grad()
            loss = problem(kiln, ps)
            loss.backward()
            return loss
        o.step(closure)
    for p, q in zip(params, twin):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    assert opt2.param_groups[0]["history_size"] == 4


def test_loads_a_torch_lbfgs_state_dict_and_continues_like_torch():
    problem, init = PROBLEMS["least_squares"]
    start = init()
    _, _, topt = _run(torch, problem, start, 2, max_iter=3)
    tparams = topt.param_groups[0]["params"]
    params = [kiln.tensor(p.detach().numpy().copy(), requires_grad=True) for p in tparams]
    opt = kiln.optim.LBFGS(params, max_iter=3)
    opt.load_state_dict(topt.state_dict())
    for lib, o, ps in ((kiln, opt, params), (torch, topt, tparams)):
        def closure(lib=lib, o=o, ps=ps):
            o.zero_grad()
            loss = problem(lib, ps)
            loss.backward()
            return loss
        o.step(closure)
    for p, q in zip(params, tparams):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **TOL)


def test_bad_options_name_the_fix():
    w, v = kiln.zeros(2, requires_grad=True), kiln.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="per-parameter options"):
        kiln.optim.LBFGS([{"params": [w]}, {"params": [v]}])
    with pytest.raises(ValueError, match="line_search_fn must be None or 'strong_wolfe'"):
        kiln.optim.LBFGS([w], line_search_fn="backtracking")
    with pytest.raises(ValueError, match="max_iter must be a positive int"):
        kiln.optim.LBFGS([w], max_iter=0)
    with pytest.raises(ValueError, match="learning rate"):
        kiln.optim.LBFGS([w], lr=-1)
    with pytest.raises(TypeError, match=r"needs a closure.*step\(closure\)"):
        kiln.optim.LBFGS([w]).step()


def test_line_search_matches_torch_on_random_one_dimensional_problems():
    """Every branch of the bracketing and zoom phases, against PyTorch's own strong Wolfe search."""
    wolfe = getattr(importlib.import_module("torch.optim.lbfgs"), "_strong_wolfe", None)
    if wolfe is None:
        pytest.skip("this PyTorch has no torch.optim.lbfgs._strong_wolfe")
    from kiln.optim.line_search import strong_wolfe

    rng = np.random.default_rng(0)
    for case in range(300):
        a = rng.uniform(0.2, 4)
        f, grad = [(lambda x: (np.sin(3 * x) * a + x ** 2 / 4).sum(), lambda x: 3 * a * np.cos(3 * x) + x / 2),
                   (lambda x: (np.exp(a * x) - 2 * a * x).sum(), lambda x: a * np.exp(a * x) - 2 * a),
                   (lambda x: ((x ** 2 - a) ** 2).sum(), lambda x: 4 * x * (x ** 2 - a))][case % 3]
        x0 = rng.normal(size=2) * 2
        g0 = grad(x0)
        d = -g0 * rng.uniform(0.1, 3, size=2)
        t0, max_ls = float(rng.choice([1.0, 0.1, 3.0, 10.0, 0.01])), int(rng.choice([25, 3, 6, 10]))
        tol = float(rng.choice([1e-9, 1e-3, 1e-2]))
        with np.errstate(over="ignore", invalid="ignore"):
            got = strong_wolfe(lambda s: (f(x0 + s * d), grad(x0 + s * d)), d, t0, f(x0), g0, float(g0 @ d),
                               tolerance_change=tol, max_ls=max_ls)
            want = wolfe(lambda _, s, __: (float(f(x0 + float(s) * d)), torch.tensor(grad(x0 + float(s) * d))),
                         None, t0, torch.tensor(d), float(f(x0)), torch.tensor(g0),
                         torch.tensor(float(g0 @ d), dtype=torch.float64), tolerance_change=tol, max_ls=max_ls)
        assert got[3] == want[3], case
        np.testing.assert_allclose(got[2], float(want[2]), rtol=1e-12, err_msg=f"case {case}")


def test_cubic_minimizer_is_symmetric_in_its_points():
    from kiln.optim.line_search import cubic_minimizer

    assert cubic_minimizer(0.0, 1.0, -1.0, 2.0, 1.0, 1.0) == 1.0
    args = (0.5, 2.0, -3.0, 2.5, 1.0, 0.5)
    assert cubic_minimizer(*args) == cubic_minimizer(*args[3:], *args[:3])
    assert cubic_minimizer(0.0, 0.0, 1.0, 1.0, 0.8, 1.0) == 0.5  # no minimizer: the middle
    assert cubic_minimizer(0.0, 1.0, -1.0, 2.0, 1.0, 1.0, bounds=(1.5, 3.0)) == 1.5


# ---- kiln.compile ---------------------------------------------------------------------------------
def _fit(compile_mode):
    """Two strong-Wolfe steps of a least-squares fit, with the step or the closure compiled (or neither)."""
    w = kiln.zeros(4, 2, dtype=kiln.float64, requires_grad=True)
    b = kiln.zeros(2, dtype=kiln.float64, requires_grad=True)
    opt = kiln.optim.LBFGS([w, b], line_search_fn="strong_wolfe", max_iter=5)

    def closure():
        opt.zero_grad()
        loss = _least_squares(kiln, [w, b])
        loss.backward()
        return loss

    if compile_mode == "closure":
        closure = kiln.compile(closure)
    step = (lambda: opt.step(closure)) if compile_mode != "step" else kiln.compile(lambda: opt.step(closure))
    losses = [float(step()) for _ in range(2)]
    return w.detach().numpy(), b.detach().numpy(), losses, step


def test_compiling_a_function_that_steps_falls_back_to_eager_naming_the_fix():
    want = _fit(None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _fit("step")
    messages = [str(w.message) for w in caught]
    assert any("LBFGS.step(closure)" in m and "compile the closure instead" in m for m in messages), messages
    assert got[3].stats.fallbacks >= 1
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(g, w)


def test_fullgraph_compile_of_a_step_raises_graph_break_error():
    w = kiln.zeros(2, requires_grad=True)
    opt = kiln.optim.LBFGS([w])

    def closure():
        opt.zero_grad()
        loss = ((w - 1) ** 2).sum()
        loss.backward()
        return loss

    with pytest.raises(kiln.GraphBreakError, match="LBFGS.*kiln.compile\\(closure\\)"):
        kiln.compile(lambda: opt.step(closure), fullgraph=True)()


def test_a_compiled_closure_gives_the_eager_trajectory():
    want = _fit(None)
    got = _fit("closure")
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
