"""Module-form programs: random nn stacks trained a few steps, compiled vs eager.

A `ModuleProgram` names its layers, loss, optimizer and how it is compiled:
"module" compiles the model (kiln.compile(model)), "loss_fn" compiles a function
that closes over the model and returns the loss. Both runs build the model from
the same seed and reseed kiln's RNG before each step, so dropout masks agree.
After training, the model is switched to eval mode and called once more.
"""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

from .harness import compare_arrays, rounding_noise
from .programs import FLOATS

OPTIMIZERS = {"SGD": kiln.optim.SGD, "Adam": kiln.optim.Adam, "AdamW": kiln.optim.AdamW,
              "RMSprop": kiln.optim.RMSprop}


@dataclass(frozen=True)
class Layer:
    """One nn layer: ``getattr(kiln.nn, kind)(*args, **kwargs)``."""

    kind: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def source(self) -> str:
        text = f"Layer({self.kind!r}"
        if self.args or self.kwargs:
            text += f", {self.args!r}"
        if self.kwargs:
            text += f", {self.kwargs!r}"
        return text + ")"

    __repr__ = source

    def __hash__(self) -> int:
        return hash((self.kind, self.args, repr(sorted(self.kwargs.items()))))

    def build(self) -> nn.Module:
        return getattr(nn, self.kind)(*self.args, **self.kwargs)


@dataclass
class ModuleProgram:
    """A model (layers), its data (input shape, classes), loss, optimizer, and how it is compiled."""

    layers: list
    input_shape: tuple
    classes: int
    loss: str = "cross_entropy"  # or "mse"
    optimizer: str = "SGD"
    opt_kwargs: dict = field(default_factory=lambda: {"lr": 0.1})
    steps: int = 3
    dtype: str = "float32"
    seed: int = 0
    mode: str = "module"  # or "loss_fn"
    vocab: int = 0  # > 0: the input is int64 tokens in [0, vocab) (for an Embedding first layer)
    dynamic: bool = False  # the batch size changes from step to step, compiled with dynamic_dims

    def source(self) -> str:
        lines = ["ModuleProgram(layers=["]
        lines += [f"    {layer.source()}," for layer in self.layers]
        lines.append(f"], input_shape={self.input_shape!r}, classes={self.classes!r}, loss={self.loss!r}, "
                     f"optimizer={self.optimizer!r}, opt_kwargs={self.opt_kwargs!r}, steps={self.steps!r}, "
                     f"dtype={self.dtype!r}, seed={self.seed!r}, mode={self.mode!r}"
                     + (f", vocab={self.vocab!r}" if self.vocab else "")
                     + (", dynamic=True)" if self.dynamic else ")"))
        return "\n".join(lines)

    __str__ = __repr__ = source

    def build(self) -> nn.Module:
        kiln.manual_seed(self.seed)
        model = nn.Sequential(*[layer.build() for layer in self.layers])
        return model.double() if self.dtype == "float64" else model

    def batch(self, step: int) -> tuple[kiln.Tensor, kiln.Tensor]:
        rng = np.random.default_rng([self.seed, step])
        n = self.input_shape[0] + (step % 3 if self.dynamic else 0)
        shape = (n,) + tuple(self.input_shape[1:])
        if self.vocab:
            x = kiln.from_numpy(np.array(rng.integers(0, self.vocab, size=shape, dtype=np.int64)))
        else:
            x = kiln.from_numpy(rng.standard_normal(shape).astype(self.dtype))
        if self.loss == "cross_entropy":
            y = kiln.from_numpy(rng.integers(0, self.classes, size=(n,), dtype=np.int64))
        else:
            y = kiln.from_numpy(rng.standard_normal((n, self.classes)).astype(self.dtype))
        return x, y


def _loss(kind: str, out: kiln.Tensor, y: kiln.Tensor) -> kiln.Tensor:
    return F.cross_entropy(out, y) if kind == "cross_entropy" else F.mse_loss(out, y)


@dataclass
class Trajectory:
    """What training made observable: per-step losses and grads, final params and buffers, eval outputs."""

    error: str | None = None
    losses: list = field(default_factory=list)
    grads: list = field(default_factory=list)  # per step: list of grad arrays (or None)
    params: list = field(default_factory=list)
    buffers: list = field(default_factory=list)
    eval_outputs: list = field(default_factory=list)


_USER_SOURCE = """
def make(model, kind, loss):
    def loss_fn(x, y):
        return loss(kind, model(x), y)

    def forward_fn(x):
        return model(x)

    return loss_fn, forward_fn
"""


def _user_closures(model: nn.Module, kind: str) -> tuple[Callable, Callable]:
    """Closures over the model, compiled as if written in a user's file.

    kiln's JIT treats code inside the kiln package as library code (it guards only what
    user code reads), so the functions a user would write must not live in kiln/fuzz.
    """
    namespace: dict[str, Any] = {}
    exec(compile(_USER_SOURCE, "<kiln.fuzz user code>", "exec"), namespace)  # noqa: S102
    return namespace["make"](model, kind, _loss)


def train(program: ModuleProgram, backend: str | None) -> Trajectory:
    """Train eagerly (backend None) or compiled on `backend`; record the trajectory."""
    traj = Trajectory()
    model = program.build()
    opt = OPTIMIZERS[program.optimizer](model.parameters(), **program.opt_kwargs)
    if backend is None:
        forward: Callable = model
        step_loss: Callable = lambda x, y: _loss(program.loss, model(x), y)  # noqa: E731
    elif program.mode == "module":
        forward = kiln.compile(model, backend=backend, dynamic_dims={0: {0: "B"}} if program.dynamic else None)
        step_loss = lambda x, y: _loss(program.loss, forward(x), y)  # noqa: E731
    else:
        loss_fn, forward_fn = _user_closures(model, program.loss)
        dims = {0: {0: "B"}} if program.dynamic else None
        step_loss = kiln.compile(loss_fn, backend=backend, dynamic_dims={0: {0: "B"}, 1: {0: "B"}} if dims else None)
        forward = kiln.compile(forward_fn, backend=backend, dynamic_dims=dims)
    try:
        for step in range(program.steps):
            x, y = program.batch(step)
            kiln.manual_seed(500 + step)
            loss = step_loss(x, y)
            opt.zero_grad()
            loss.backward()
            traj.grads.append([None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()])
            opt.step()
            traj.losses.append(np.array(loss.detach().numpy(), copy=True))
        x, y = program.batch(program.steps)
        for training in (True, False):  # the same calls in train and eval mode must not share a plan
            model.train(training)
            for grad_mode in (contextlib.nullcontext(), kiln.no_grad()):
                with grad_mode:
                    kiln.manual_seed(700)
                    traj.eval_outputs.append(np.array(step_loss(x, y).detach().numpy(), copy=True))
                    traj.eval_outputs.append(np.array(forward(x).detach().numpy(), copy=True))
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
        traj.error = f"{type(exc).__name__}: {exc}"
    traj.params = [p.detach().numpy().copy() for p in model.parameters()]
    traj.buffers = [b.detach().numpy().copy() for b in model.buffers()]
    return traj


def compare_trajectories(label: str, got: Trajectory, want: Trajectory,
                         noisy: Callable[[], list[Trajectory]] | None = None) -> list[str]:
    """Mismatches between a compiled trajectory and eager's. `noisy()` gives eager trajectories whose
    every op result and gradient contribution was nudged by an ulp (harness.rounding_noise): a value
    still passes where it differs no more than that nudging moved it (compare_arrays). Training
    amplifies rounding where a gradient is zero in exact arithmetic (softmax's invariance to an
    attention key's bias, say): Adam divides its rounding noise by its own size."""
    if got.error or want.error:
        if (got.error or "").split(":")[0] == (want.error or "").split(":")[0]:
            return []
        return [f"{label}: compiled raised {got.error}; eager raised {want.error}"]
    problems = []
    picks: list[tuple[str, Callable[[Trajectory], Any]]] = [
        (f"loss at step {i}", lambda t, i=i: t.losses[i]) for i in range(len(want.losses))]
    for i, (gs, ws) in enumerate(zip(got.grads, want.grads)):
        for k, (g, w) in enumerate(zip(gs, ws)):
            if (g is None) != (w is None):
                problems.append(f"{label} grad of param {k} at step {i}: compiled {g is not None}, eager {w is not None}")
            elif g is not None:
                picks.append((f"grad of param {k} at step {i}", lambda t, i=i, k=k: t.grads[i][k]))
    picks += [(f"param {k}", lambda t, k=k: t.params[k]) for k in range(len(want.params))]
    picks += [(f"buffer {k}", lambda t, k=k: t.buffers[k]) for k in range(len(want.buffers))]
    picks += [(f"eval output {k}", lambda t, k=k: t.eval_outputs[k]) for k in range(len(want.eval_outputs))]
    for what, pick in picks:
        try:
            g = pick(got)
        except IndexError:
            problems.append(f"{label} {what}: missing from the compiled trajectory")
            break

        def spread(pick: Callable[[Trajectory], Any] = pick) -> list[Any] | None:
            runs = [t for t in noisy() if not t.error] if noisy is not None else []
            try:
                return [pick(t) for t in runs] or None
            except IndexError:
                return None

        msg = compare_arrays(f"{label} {what}", g, pick(want), noisy=spread if noisy is not None else None)
        if msg:
            problems.append(msg)
            break  # later values follow from the first difference
    return problems


def check_module_program(program: ModuleProgram, backends: list[str] | None = None) -> list[str]:
    """Mismatches between eager and compiled training of `program` on every backend."""
    from kiln.jit.backends import BACKENDS  # noqa: PLC0415

    problems: list[str] = []
    noisy_runs: list[Trajectory] = []

    def noisy() -> list[Trajectory]:  # eager under rounding noise, three seeds, made only when needed
        if not noisy_runs:
            for seed in (1, 2, 3):
                with rounding_noise(seed):
                    noisy_runs.append(train(program, None))
        return noisy_runs

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        eager = train(program, None)
        for name in backends or list(BACKENDS):
            problems += compare_trajectories(f"[{name}]", train(program, name), eager, noisy)
    return problems


# ---- the strategy ------------------------------------------------------------------
ACTIVATIONS = ["ReLU", "Tanh", "GELU", "Sigmoid", "SiLU", "LeakyReLU", "Softplus"]


@st.composite
def module_programs(draw: Callable) -> ModuleProgram:
    """A random Sequential over vectors, images, token sequences (transformer layers) or 1-d signals,
    with a loss, an optimizer and a compile mode."""
    n = draw(st.integers(2, 4))
    kind = draw(st.sampled_from(["vector", "image", "sequence", "signal"]))
    layers: list[Layer] = []
    vocab = 0
    if kind == "sequence":  # tokens -> Embedding -> transformer layers -> flatten
        vocab, length = draw(st.integers(2, 6)), draw(st.integers(1, 4))
        heads = draw(st.integers(1, 2))
        embed = heads * draw(st.integers(1, 3))
        input_shape: tuple = (n, length)
        layers.append(Layer("Embedding", (vocab, embed)))
        for _ in range(draw(st.integers(1, 2))):
            layers.append(Layer("TransformerEncoderLayer", (embed, heads), {
                "dim_feedforward": draw(st.integers(1, 6)), "dropout": draw(st.sampled_from([0.0, 0.1])),
                "activation": draw(st.sampled_from(["relu", "gelu"])), "batch_first": True,
                "norm_first": draw(st.booleans())}))
        layers.append(Layer("Flatten"))
        features = length * embed
    elif kind == "signal":  # (N, C, L) -> Conv1d -> activation -> flatten
        c, length = draw(st.integers(1, 3)), draw(st.integers(3, 6))
        input_shape = (n, c, length)
        out, k = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        layers += [Layer("Conv1d", (c, out, k), {"padding": draw(st.integers(0, k // 2))}),
                   Layer(draw(st.sampled_from(ACTIVATIONS))), Layer("Flatten")]
        features = out * (length + 2 * layers[0].kwargs["padding"] - k + 1)
    elif kind == "image":
        c, h, w = draw(st.integers(1, 3)), draw(st.integers(3, 6)), draw(st.integers(3, 6))
        input_shape = (n, c, h, w)
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["Conv2d", "ReLU", "BatchNorm2d", "MaxPool2d", "AvgPool2d", "Dropout",
                                         "GELU"]))
            if kind == "Conv2d":
                out, k = draw(st.integers(1, 3)), draw(st.integers(1, 3))
                padding = draw(st.integers(0, k // 2))
                if h + 2 * padding < k or w + 2 * padding < k:
                    continue
                layers.append(Layer(kind, (c, out, k), {"padding": padding, "bias": draw(st.booleans())}))
                c, h, w = out, h + 2 * padding - k + 1, w + 2 * padding - k + 1
            elif kind == "BatchNorm2d":
                layers.append(Layer(kind, (c,), {"momentum": draw(st.sampled_from([0.1, 0.5]))}))
            elif kind in ("MaxPool2d", "AvgPool2d"):
                if h >= 2 and w >= 2:
                    layers.append(Layer(kind, (2,)))
                    h, w = h // 2, w // 2
            elif kind == "Dropout":
                layers.append(Layer(kind, (draw(st.sampled_from([0.5, 0.2])),)))
            else:
                layers.append(Layer(kind))
        layers.append(Layer("Flatten"))
        features = c * h * w
    else:
        features = draw(st.integers(1, 6))
        input_shape = (n, features)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["Linear", "ACT", "LayerNorm", "BatchNorm1d", "Dropout"]))
        if kind == "Linear":
            out = draw(st.integers(1, 6))
            layers.append(Layer(kind, (features, out), {"bias": draw(st.booleans())}))
            features = out
        elif kind == "ACT":
            layers.append(Layer(draw(st.sampled_from(ACTIVATIONS))))
        elif kind == "LayerNorm":
            layers.append(Layer(kind, (features,), {"elementwise_affine": draw(st.booleans())}))
        elif kind == "BatchNorm1d":
            layers.append(Layer(kind, (features,), {"momentum": draw(st.sampled_from([0.1, 0.5]))}))
        else:
            layers.append(Layer(kind, (draw(st.sampled_from([0.5, 0.2])),)))
    classes = draw(st.integers(2, 4))
    layers.append(Layer("Linear", (features, classes)))
    optimizer = draw(st.sampled_from(list(OPTIMIZERS)))
    opt_kwargs: dict[str, Any] = {"lr": draw(st.sampled_from([0.1, 0.01]))}
    if optimizer == "SGD" and draw(st.booleans()):
        opt_kwargs.update(momentum=0.9, nesterov=draw(st.booleans()))
    if optimizer in ("Adam", "AdamW") and draw(st.booleans()):
        opt_kwargs["amsgrad"] = True
    if optimizer == "RMSprop" and draw(st.booleans()):
        opt_kwargs.update(momentum=0.5, centered=True)
    if draw(st.booleans()):
        opt_kwargs["weight_decay"] = 0.01
    return ModuleProgram(layers, input_shape, classes, loss=draw(st.sampled_from(["cross_entropy", "mse"])),
                         optimizer=optimizer, opt_kwargs=opt_kwargs, steps=draw(st.integers(1, 3)),
                         dtype=draw(st.sampled_from(FLOATS)), seed=draw(st.integers(0, 2 ** 16)),
                         mode=draw(st.sampled_from(["module", "loss_fn"])), vocab=vocab,
                         dynamic=draw(st.sampled_from([False, False, True])))
