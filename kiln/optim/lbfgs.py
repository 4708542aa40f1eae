"""L-BFGS: a quasi-Newton optimizer that re-evaluates the loss through a closure.

Each iteration picks a direction ``d = -H g``, where ``H`` approximates the inverse
Hessian from the last `history_size` pairs ``s = x_new - x_old``, ``y = g_new - g_old``,
applied to ``g`` without forming it (the two-loop recursion, starting from the scaled
identity ``H0 = s.y / y.y`` of the newest pair), then steps along it by a fixed step or a
strong Wolfe line search (kiln.optim.line_search). A pair whose curvature ``s.y`` is not above
1e-10 is skipped, which keeps ``H`` positive definite.

All parameters are treated as one flat vector; the arithmetic runs in NumPy on the
parameters' arrays, eagerly. A step calls the closure many times with Python control flow
on the losses, so it cannot be one compiled plan: inside kiln.compile it is a graph break.
Compile the closure instead (``closure = kiln.compile(closure)``): each evaluation then
replays a plan.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..autograd import enable_grad
from ..trace_state import trace_state
from ..tensor import Tensor, _to_host
from .line_search import strong_wolfe
from .optimizer import Optimizer, ParamsT, StateDict

_FLAT_KEYS = ("d", "prev_flat_grad")


class LBFGS(Optimizer):
    """L-BFGS with PyTorch's options and closure API; every step calls ``closure()`` up to `max_eval` times.

    One parameter group only. `lr` scales the step (the first iteration's step is
    ``lr * min(1, 1 / sum|g|)``). A step ends after `max_iter` iterations or `max_eval`
    evaluations (default ``max_iter * 5 // 4``), when ``max|g| <= tolerance_grad``, or when
    the step, or the change in loss, falls to `tolerance_change`. ``line_search_fn`` is None
    (fixed steps) or ``"strong_wolfe"`` (which may spend the evaluations left of `max_eval`).
    `step` returns the closure's first loss.

    >>> opt = kiln.optim.LBFGS([w], lr=1, line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = ((x @ w - y) ** 2).mean()
    ...     loss.backward()
    ...     return loss
    >>> loss = opt.step(closure)
    """

    def __init__(self, params: ParamsT, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None):
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                        tolerance_change=tolerance_change, history_size=history_size,
                        line_search_fn=line_search_fn)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups): it optimizes "
                             "all parameters as one vector; pass every tensor in one list")
        super().add_param_group(param_group)

    def _validate_group(self, group: dict[str, Any]) -> None:
        super()._validate_group(group)
        for key in ("max_iter", "max_eval", "history_size"):
            value = dict.__getitem__(group, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"LBFGS {key} must be a positive int, got {value!r}")
        fn = dict.__getitem__(group, "line_search_fn")
        if fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS line_search_fn must be None or 'strong_wolfe', got {fn!r}")

    # ---- the flat parameter vector ---------------------------------------------------------
    def _params(self) -> list[Tensor]:
        return dict.__getitem__(self.param_groups[0], "params")

    def _flat_grad(self) -> np.ndarray:
        """All gradients as one new vector (zeros for a parameter without a gradient)."""
        parts = []
        for p in self._params():
            g = p.grad
            parts.append(np.zeros(p._data.size, dtype=p._data.dtype) if g is None else _to_host(g._data).ravel())
        return np.concatenate(parts) if parts else np.zeros(0)

    def _flat_params(self) -> np.ndarray:
        return np.concatenate([_to_host(p._data).ravel() for p in self._params()])

    def _add_to_params(self, step: float, direction: np.ndarray) -> None:
        """``p += step * direction`` (the direction's slice for each parameter), in place."""
        offset = 0
        for p in self._params():
            n = p._data.size
            part = (step * direction[offset:offset + n]).reshape(p._data.shape)
            p._data += p._device.xp.asarray(part.astype(p._data.dtype, copy=False))
            p._bump_version()
            offset += n

    def _set_params(self, flat: np.ndarray) -> None:
        offset = 0
        for p in self._params():
            n = p._data.size
            p._data[...] = p._device.xp.asarray(flat[offset:offset + n].reshape(p._data.shape))
            p._bump_version()
            offset += n

    # ---- the step ------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run up to `max_iter` L-BFGS iterations; return the loss of the first ``closure()`` call."""
        if closure is None:
            raise TypeError("LBFGS.step needs a closure that clears the gradients, computes the loss, calls "
                            "loss.backward() and returns the loss: optimizer.step(closure)")
        tracer = trace_state.tracer
        if tracer is None:
            return self._run(closure)
        _break_trace(tracer)
        trace_state.tracer = None  # the step runs eagerly; this call signature falls back to eager
        try:
            return self._run(closure)
        finally:
            trace_state.tracer = tracer

    def _run(self, closure: Callable[[], Any]) -> Any:
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        history_size, line_search = group["history_size"], group["line_search_fn"]
        state = self._flat_state()

        def evaluate() -> tuple[Any, float, np.ndarray]:
            with enable_grad():
                out = closure()
            return out, float(out), self._flat_grad()

        first_loss, loss, g = evaluate()
        state["func_evals"] += 1
        evals = 1
        if np.abs(g).max() <= tol_grad:  # already optimal
            self.state[self._params()[0]]["func_evals"] = state["func_evals"]
            self.state[self._params()[0]]["n_iter"] = state["n_iter"]
            return first_loss
        d, t = state["d"], state["t"]
        old_dirs, old_stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        h_diag, prev_g, prev_loss = state["H_diag"], state["prev_flat_grad"], state["prev_loss"]
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d, h_diag = -g, 1.0
                old_dirs, old_stps, ro = [], [], []
            else:
                y, s = g - prev_g, d * t
                ys = float(y @ s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        del old_dirs[0], old_stps[0], ro[0]
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / float(y @ y)
                d = _two_loop(g, old_dirs, old_stps, ro, h_diag)
            prev_g, prev_loss = g.copy(), loss
            t = min(1.0, 1.0 / float(np.abs(g).sum())) * lr if state["n_iter"] == 1 else lr
            gtd = float(g @ d)
            if gtd > -tol_change:  # not a descent direction (to within tolerance)
                break
            if line_search is not None:
                x0 = self._flat_params()

                def along(step: float) -> tuple[float, np.ndarray]:
                    self._add_to_params(step, d)
                    _, value, grad = evaluate()
                    self._set_params(x0)
                    return value, grad

                loss, g, t, used = strong_wolfe(along, d, t, loss, g, gtd, tolerance_change=tol_change,
                                                max_ls=max_eval - evals)
                self._add_to_params(t, d)
                converged = np.abs(g).max() <= tol_grad
            else:
                self._add_to_params(t, d)
                used, converged = 0, False
                if n_iter != max_iter:
                    _, loss, g = evaluate()
                    used, converged = 1, np.abs(g).max() <= tol_grad
            evals += used
            state["func_evals"] += used
            if n_iter == max_iter or evals >= max_eval or converged:
                break
            if np.abs(d * t).max() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                     prev_flat_grad=prev_g, prev_loss=prev_loss)
        self._store_state(state)
        return first_loss

    # ---- state: NumPy while stepping, kiln tensors in `self.state` ------------------------
    def _flat_state(self) -> dict[str, Any]:
        """This optimizer's state (kept on the first parameter, as PyTorch does), as NumPy and floats."""
        saved = self.state[self._params()[0]]
        state: dict[str, Any] = {"func_evals": int(saved.get("func_evals", 0)), "n_iter": int(saved.get("n_iter", 0))}
        for key in _FLAT_KEYS:
            state[key] = _array(saved.get(key))
        for key in ("old_dirs", "old_stps"):
            state[key] = [_array(v) for v in saved.get(key, [])]
        state["ro"] = [float(v) for v in saved.get("ro", [])]
        for key in ("t", "H_diag", "prev_loss"):
            state[key] = None if saved.get(key) is None else float(_array(saved[key]))
        return state

    def _store_state(self, state: dict[str, Any]) -> None:
        p = self._params()[0]
        saved = self.state[p]
        saved["func_evals"], saved["n_iter"] = state["func_evals"], state["n_iter"]
        for key in _FLAT_KEYS:
            saved[key] = _tensor(state[key], p)
        for key in ("old_dirs", "old_stps"):
            saved[key] = [_tensor(v, p) for v in state[key]]
        saved["ro"] = list(state["ro"])
        for key in ("t", "H_diag", "prev_loss"):
            saved[key] = state[key]

    def load_state_dict(self, state_dict: StateDict) -> None:
        """Load a `state_dict()` of an LBFGS (kiln's or PyTorch's) over the same parameters.

        The flat vectors of the state (``d``, ``prev_flat_grad``, the history) are copied
        into tensors of the first parameter's dtype and device.
        """
        if not isinstance(state_dict, dict) or "state" not in state_dict:
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise ValueError(f"optimizer state_dict must be a dict with keys 'state' and 'param_groups', got {got}")
        saved = dict(state_dict["state"])
        super().load_state_dict({"state": {}, "param_groups": state_dict["param_groups"]})
        entry = saved.pop(0, None)
        if saved:
            raise ValueError(f"LBFGS keeps its state under parameter 0, but the loaded state dict also has entries "
                             f"for {sorted(saved)}; was it saved from another optimizer?")
        if entry is None:
            return
        p = self._params()[0]
        self.state[p] = {key: [_loaded(v, p) for v in value] if isinstance(value, (list, tuple)) else _loaded(value, p)
                         for key, value in entry.items()}


def _two_loop(g: np.ndarray, dirs: list[np.ndarray], stps: list[np.ndarray], ro: list[float],
              h_diag: float) -> np.ndarray:
    """``-H g`` for the L-BFGS inverse-Hessian estimate built from the stored pairs."""
    q = -g
    alphas = [0.0] * len(dirs)
    for i in range(len(dirs) - 1, -1, -1):
        alphas[i] = float(stps[i] @ q) * ro[i]
        q = q - alphas[i] * dirs[i]
    r = q * h_diag
    for i in range(len(dirs)):
        beta = float(dirs[i] @ r) * ro[i]
        r = r + stps[i] * (alphas[i] - beta)
    return r


def _break_trace(tracer: Any) -> None:
    """An LBFGS step inside kiln.compile: a graph break (GraphBreakError with fullgraph=True)."""
    from ..jit.trace import GraphBreakError, user_location  # noqa: PLC0415 - kiln.jit imports kiln.optim

    message = (f"LBFGS.step(closure) at {user_location()} calls the closure many times and branches on the "
               "losses, which one compiled plan cannot replay. Fix: call optimizer.step(closure) outside the "
               "compiled function and compile the closure instead (closure = kiln.compile(closure)); with "
               "fullgraph=False this call signature runs eagerly.")
    if getattr(tracer, "fullgraph", False):
        raise GraphBreakError(message)
    if getattr(tracer, "graph_break", None) is None:
        tracer.graph_break = message


def _loaded(value: Any, like: Tensor) -> Any:
    """One loaded state entry: a vector becomes a private flat tensor like `like`, a 0-d one a number."""
    if not (isinstance(value, (Tensor, np.ndarray)) or (hasattr(value, "detach") and hasattr(value, "cpu"))):
        return value
    arr = np.array(_array(value))
    return arr.item() if arr.ndim == 0 else _tensor(arr, like)


def _array(value: Any) -> Any:
    """The NumPy data of a kiln tensor (shared on the CPU), NumPy array or torch tensor; None stays None."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        return _to_host(value._data)
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch.Tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _tensor(arr: np.ndarray | None, like: Tensor) -> Tensor | None:
    if arr is None:
        return None
    data = np.ascontiguousarray(arr, dtype=like._data.dtype).reshape(-1)
    return Tensor._wrap(like._device.xp.asarray(data), like._device)
