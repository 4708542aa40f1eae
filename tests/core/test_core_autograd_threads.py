"""backward() from several threads on one model: every thread's gradient lands in .grad.

PyTorch serializes the accumulation into a leaf's .grad (a lock in its AccumulateGrad), so
threads that share parameters and each call backward() get the sum of all their gradients.
kiln must do the same: an unguarded ``p.grad = p.grad + g`` loses updates when two threads
interleave between the read and the write.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np
import pytest

import kiln

N_THREADS = 8
STEPS = 25
IN, HIDDEN, OUT = 6, 8, 3


@contextmanager
def tiny_switch_interval() -> Iterator[None]:
    """Make races show up at once: switch threads as often as possible, and let other threads
    run in the middle of every tensor addition (where ``p.grad = p.grad + g`` reads the old
    .grad and has not yet written the new one)."""
    old = sys.getswitchinterval()
    plain_add = kiln.Tensor.__add__

    def yielding_add(a: kiln.Tensor, b: object) -> kiln.Tensor:
        time.sleep(0)  # gives up the GIL: another thread may now read or write the same .grad
        return plain_add(a, b)

    sys.setswitchinterval(1e-6)
    kiln.Tensor.__add__ = yielding_add
    try:
        yield
    finally:
        kiln.Tensor.__add__ = plain_add
        sys.setswitchinterval(old)


def run_threads(work: Callable[[int], None], n: int = N_THREADS) -> None:
    """Run work(0..n-1) in n threads started together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def target(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except BaseException as exc:  # noqa: BLE001 - reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def inputs(seed: int = 0) -> np.ndarray:
    """Different inputs for every (thread, step): shape (threads, steps, batch, IN)."""
    return np.random.default_rng(seed).standard_normal((N_THREADS, STEPS, 2, IN))


def make_mlp() -> kiln.nn.Module:
    kiln.manual_seed(0)
    return kiln.nn.Sequential(kiln.nn.Linear(IN, HIDDEN), kiln.nn.Tanh(), kiln.nn.Linear(HIDDEN, OUT)).double()


def loss_of(model: kiln.nn.Module, x: np.ndarray) -> kiln.Tensor:
    return (model(kiln.tensor(x)) ** 2).sum()


def sequential_grads(model: kiln.nn.Module, xs: np.ndarray) -> list[np.ndarray]:
    """The sum of every (thread, step) gradient, computed in one thread."""
    model.zero_grad()
    for t in range(xs.shape[0]):
        for s in range(xs.shape[1]):
            loss_of(model, xs[t, s]).backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    return grads


def threaded_grads(model: kiln.nn.Module, xs: np.ndarray) -> list[np.ndarray]:
    model.zero_grad()

    def work(i: int) -> None:
        for s in range(xs.shape[1]):
            loss_of(model, xs[i, s]).backward()

    with tiny_switch_interval():
        run_threads(work)
    return [p.grad.numpy().copy() for p in model.parameters()]


def test_threads_calling_backward_on_one_model_lose_no_update() -> None:
    model = make_mlp()
    xs = inputs()
    expected = sequential_grads(model, xs)
    for attempt in range(2):  # without the lock a lost update shows at once
        got = threaded_grads(model, xs)
        for e, g in zip(expected, got):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12,
                                       err_msg=f"attempt {attempt}: threaded .grad lost updates")


def test_threaded_grads_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    model = make_mlp()
    xs = inputs(1)
    got = threaded_grads(model, xs)

    lin1, lin2 = model[0], model[2]
    tm = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, OUT)).double()
    with torch.no_grad():
        for tl, kl in ((tm[0], lin1), (tm[2], lin2)):
            tl.weight.copy_(torch.from_numpy(kl.weight.detach().numpy().copy()))
            tl.bias.copy_(torch.from_numpy(kl.bias.detach().numpy().copy()))

    def work(i: int) -> None:
        for s in range(xs.shape[1]):
            (tm(torch.from_numpy(xs[i, s])) ** 2).sum().backward()

    run_threads(work)
    for g, tp in zip(got, tm.parameters()):
        np.testing.assert_allclose(g, tp.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_threaded_backward_with_create_graph_accumulates_every_thread() -> None:
    w = kiln.tensor(np.linspace(-1.0, 1.0, 5), dtype=kiln.float64, requires_grad=True)
    xs = inputs(2)[:, :, 0, :5]

    def work(i: int) -> None:
        for s in range(xs.shape[1]):
            (w * kiln.tensor(xs[i, s])).sum().backward(create_graph=True)

    with tiny_switch_interval():
        run_threads(work)
    np.testing.assert_allclose(w.grad.detach().numpy(), xs.sum(axis=(0, 1)), rtol=1e-12, atol=1e-12)


def test_threaded_backward_with_inputs_accumulates_every_thread() -> None:
    w = kiln.tensor(np.linspace(-1.0, 1.0, 5), dtype=kiln.float64, requires_grad=True)
    xs = inputs(3)[:, :, 0, :5]

    def work(i: int) -> None:
        for s in range(xs.shape[1]):
            (w * kiln.tensor(xs[i, s])).sum().backward(inputs=[w])

    with tiny_switch_interval():
        run_threads(work)
    np.testing.assert_allclose(w.grad.numpy(), xs.sum(axis=(0, 1)), rtol=1e-12, atol=1e-12)


def test_hooks_and_retain_grad_still_work_from_threads() -> None:
    w = kiln.tensor(np.linspace(-1.0, 1.0, 5), dtype=kiln.float64, requires_grad=True)
    xs = inputs(4)[:, :, 0, :5]
    seen: list[int] = []
    seen_lock = threading.Lock()

    def count(g: kiln.Tensor) -> kiln.Tensor:
        with seen_lock:
            seen.append(1)
        return g * 2  # a hook may replace the gradient: .grad gets the doubled one

    w.register_hook(count)
    retained: list[tuple[np.ndarray, np.ndarray]] = []

    def work(i: int) -> None:
        for s in range(xs.shape[1]):
            x = kiln.tensor(xs[i, s])
            y = w * x
            y.retain_grad()
            (y * 3.0).sum().backward()
            retained.append((y.grad.numpy().copy(), x.numpy()))

    with tiny_switch_interval():
        run_threads(work)
    assert len(seen) == N_THREADS * STEPS  # the leaf hook ran once per backward
    np.testing.assert_allclose(w.grad.numpy(), 2 * 3 * xs.sum(axis=(0, 1)), rtol=1e-12, atol=1e-12)
    assert len(retained) == N_THREADS * STEPS
    for grad, _ in retained:  # every thread's own non-leaf keeps its own gradient
        np.testing.assert_allclose(grad, np.full(5, 3.0))
