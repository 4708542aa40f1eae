"""Layers real PyTorch projects use that kiln lacked (issue 25): InstanceNorm, padding layers and F.pad's
modes, PReLU, PixelShuffle/Unshuffle, EmbeddingBag, DataParallel and more activations.

Each is compared with PyTorch on the same weights and inputs (forward, input and parameter
gradients, running stats), and kiln.compile must give eager's results bit for bit.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from compile_parity import check_compiled
from nn_parity import assert_close, check_parity, copy_weights

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _rand(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape) * scale


def _compiled_equals_eager(model: nn.Module, *args) -> None:
    """Outputs and gradients of kiln.compile(model) equal eager's exactly, and no call falls back."""
    compiled = check_compiled(model, *args, dtype="float64")
    for call in range(2):
        outs = []
        for fn in (model, compiled):
            model.zero_grad()
            leaves = [a for a in args if isinstance(a, kiln.Tensor) and a.requires_grad]
            for a in leaves:
                a.grad = None
            out = fn(*args)
            upstream = kiln.tensor(_rand(*out.shape, seed=call), dtype=out.dtype)
            (out * upstream).sum().backward()
            grads = [p.grad.numpy().copy() for p in model.parameters() if p.grad is not None]
            outs.append([out.detach().numpy().copy()] + grads + [a.grad.numpy().copy() for a in leaves])
        assert all(np.array_equal(a, b) for a, b in zip(*outs)), type(model).__name__


def _same_error(kiln_call, torch_call) -> type:
    """Both calls raise; returns kiln's exception type."""
    with pytest.raises(Exception):  # noqa: B017 - PyTorch's types vary; kiln's is checked by the caller
        torch_call()
    with pytest.raises(Exception) as info:  # noqa: B017
        kiln_call()
    return info.type


# ---- F.pad ------------------------------------------------------------------------------------
PAD_CASES = [((2, 3, 5), (2, 1)), ((3, 5), (0, 4)), ((2, 3, 5), (-2, 3)), ((2, 3, 4, 5), (1, 2, 3, 1)),
             ((3, 4, 5), (2, 0, 0, 3)), ((2, 2, 3, 4, 5), (1, 2, 2, 1, 0, 2)), ((2, 3, 5), (-1, -1))]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("shape,pads", PAD_CASES, ids=[str(p) for _, p in PAD_CASES])
def test_pad_modes_match_torch_forward_and_grad(mode, shape, pads):
    x = _rand(*shape)
    kx, tx = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours, theirs = F.pad(kx, pads, mode=mode), TF.pad(tx, pads, mode=mode)
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())
    upstream = _rand(*theirs.shape, seed=1)
    (ours * kiln.tensor(upstream)).sum().backward()
    (theirs * torch.tensor(upstream)).sum().backward()
    assert_close(kx.grad, tx.grad, "float64", "grad")


def test_pad_constant_value_and_the_old_spelling_still_work():
    x = _rand(2, 3)
    np.testing.assert_array_equal(F.pad(kiln.tensor(x), (1, 2), value=-1.5).numpy(),
                                  TF.pad(torch.tensor(x), (1, 2), value=-1.5).numpy())
    assert F.pad(kiln.tensor(x), [1, 1, 1, 1]).shape == (4, 5)
    assert kiln.nn.functional.pad is kiln.functional.pad


@pytest.mark.parametrize("mode,shape,pads,error", [
    ("reflect", (1, 1, 5), (5, 1), ValueError),        # a reflection as long as the dim
    ("reflect", (5,), (1, 1), NotImplementedError),    # 1-D input: no channel dim
    ("replicate", (1, 1, 1, 5), (1, 1), NotImplementedError),
    ("circular", (4, 5), (1, 1, 1, 1), NotImplementedError),
    ("circular", (1, 1, 5), (6, 0), ValueError),       # wraps around more than once
    ("replicate", (1, 1, 5), (-5, 0), ValueError),     # crops everything
    ("reflect", (1, 1, 5), (1, 1, 1), ValueError),     # odd number of pads
    ("bogus", (1, 1, 5), (1, 1), ValueError),
])
def test_pad_rejects_what_torch_rejects(mode, shape, pads, error):
    x = np.zeros(shape)
    got = _same_error(lambda: F.pad(kiln.tensor(x), pads, mode=mode), lambda: TF.pad(torch.tensor(x), pads, mode=mode))
    assert issubclass(got, error)


def test_pad_value_only_with_constant_mode():
    x = np.zeros((1, 1, 5))
    _same_error(lambda: F.pad(kiln.tensor(x), (1, 1), "reflect", 2.0),
                lambda: TF.pad(torch.tensor(x), (1, 1), "reflect", 2.0))
    assert F.pad(kiln.tensor(x), (1, 1), "reflect", 0.0).shape == (1, 1, 7)  # a zero value is allowed, as in torch
    with pytest.raises(TypeError, match="tuple of ints"):
        F.pad(kiln.tensor(x), (1.5, 1))


# ---- padding layers ---------------------------------------------------------------------------
PAD_LAYERS = [(f"{kind}Pad{d}d", d) for kind in ("Reflection", "Replication", "Zero", "Circular") for d in (1, 2, 3)]


@pytest.mark.parametrize("name,dims", PAD_LAYERS, ids=[n for n, _ in PAD_LAYERS])
@pytest.mark.parametrize("batched", [True, False])
def test_padding_layers_match_torch(name, dims, batched):
    padding = (1, 2, 2, 0, 1, 1)[: 2 * dims]
    shape = (2, 3, 4, 5, 4)[: dims + 2] if batched else (3, 4, 5, 4)[: dims + 1]
    for arg in (padding, 1):
        ours, theirs = getattr(nn, name)(arg), getattr(torch.nn, name)(arg)
        assert repr(ours) == repr(theirs)
        assert ours.padding == theirs.padding
        check_parity(ours, theirs, [_rand(*shape)], "float64")
        _compiled_equals_eager(ours, kiln.tensor(_rand(*shape), requires_grad=True))


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_constant_pad_layers_match_torch(dims):
    padding = (2, 1, 0, 1, 1, 0)[: 2 * dims]
    shape = (2, 3, 4, 3, 4)[: dims + 2]
    name = f"ConstantPad{dims}d"
    ours, theirs = getattr(nn, name)(padding, 3.5), getattr(torch.nn, name)(padding, 3.5)
    assert repr(ours) == repr(theirs)
    check_parity(ours, theirs, [_rand(*shape)], "float64")
    _compiled_equals_eager(ours, kiln.tensor(_rand(*shape), requires_grad=True))
    assert isinstance(getattr(nn, f"ZeroPad{dims}d")(1), getattr(nn, f"ConstantPad{dims}d"))


def test_padding_layer_arguments_are_checked():
    with pytest.raises(ValueError, match="tuple of 4 ints"):
        nn.ReflectionPad2d((1, 2))
    with pytest.raises(ValueError, match="tuple of 2 ints"):
        nn.ZeroPad1d(1.5)
    with pytest.raises(ValueError, match="expected 3D .* or 4D input"):
        nn.CircularPad2d(1)(kiln.zeros(5, 5))
    with pytest.raises(ValueError):
        torch.nn.CircularPad2d(1)(torch.zeros(5, 5))


# ---- InstanceNorm -----------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("track", [False, True])
def test_instance_norm_matches_torch_in_train_and_eval(dims, affine, track):
    name = f"InstanceNorm{dims}d"
    ours, theirs = getattr(nn, name)(3, affine=affine, track_running_stats=track, momentum=0.3), \
        getattr(torch.nn, name)(3, affine=affine, track_running_stats=track, momentum=0.3)
    assert repr(ours) == repr(theirs)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    if affine:
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
            theirs.bias.uniform_(-0.5, 0.5)
    shape = (2, 3, 4, 3, 2)[: dims + 2]
    for step in range(2):  # training twice moves the running stats
        check_parity(ours, theirs, [_rand(*shape, seed=step) * 2 + 1], "float64")
    for key, value in theirs.state_dict().items():
        assert_close(ours.state_dict()[key], value, "float64", what=key)
    ours.eval()
    theirs.eval()
    check_parity(ours, theirs, [_rand(*shape, seed=5)], "float64")
    check_parity(ours, theirs, [_rand(*shape[1:], seed=6)], "float64")  # unbatched


def test_instance_norm_defaults_and_buffers_match_torch():
    ours, theirs = nn.InstanceNorm2d(4), torch.nn.InstanceNorm2d(4)
    assert (ours.affine, ours.track_running_stats, ours.eps, ours.momentum) == (False, False, 1e-5, 0.1)
    assert not list(ours.parameters()) and not ours.state_dict() and not theirs.state_dict()
    tracked = nn.InstanceNorm2d(4, track_running_stats=True, momentum=None)
    tracked(kiln.randn(2, 4, 3, 3))  # momentum=None leaves the running stats and the counter alone
    reference = torch.nn.InstanceNorm2d(4, track_running_stats=True, momentum=None)
    reference(torch.randn(2, 4, 3, 3))
    for key, value in reference.state_dict().items():
        np.testing.assert_array_equal(tracked.state_dict()[key].numpy(), value.numpy())


def test_instance_norm_loads_torch_weights_and_compiles():
    theirs = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True).double()
    theirs(torch.randn(4, 3, 5, 5, dtype=torch.float64) * 3 + 2)
    ours = nn.InstanceNorm2d(3, affine=True, track_running_stats=True).to("float64")
    copy_weights(ours, theirs)
    x = _rand(2, 3, 5, 5)
    assert_close(ours.eval()(kiln.tensor(x)), theirs.eval()(torch.tensor(x)), "float64")
    _compiled_equals_eager(ours, kiln.tensor(x, requires_grad=True))  # eval: the running stats
    ours.train()
    _compiled_equals_eager(ours, kiln.tensor(x, requires_grad=True))  # train: updates them too


def test_compiled_instance_norm_updates_the_running_stats_as_eager():
    eager = nn.InstanceNorm1d(3, track_running_stats=True).to("float64")
    traced = nn.InstanceNorm1d(3, track_running_stats=True).to("float64")
    compiled = kiln.compile(traced)
    for step in range(3):
        x = kiln.tensor(_rand(2, 3, 6, seed=step) + step)
        np.testing.assert_array_equal(eager(x).numpy(), compiled(x).numpy())
    for key in ("running_mean", "running_var"):
        np.testing.assert_array_equal(getattr(eager, key).numpy(), getattr(traced, key).numpy())


def test_instance_norm_input_checks():
    with pytest.raises(ValueError, match="expected 3D .* or 4D input"):
        nn.InstanceNorm2d(3)(kiln.zeros(2, 3))
    with pytest.raises(ValueError, match="channels"):
        nn.InstanceNorm2d(3, affine=True)(kiln.zeros(2, 4, 3, 3))
    with pytest.warns(UserWarning, match="num_features"):
        nn.InstanceNorm2d(3)(kiln.randn(2, 4, 3, 3))
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(kiln.zeros(2, 3, 1))
    with pytest.raises(ValueError, match="running_mean and running_var"):
        F.instance_norm(kiln.zeros(2, 3, 4), use_input_stats=False)


def test_functional_instance_norm_matches_torch():
    x, w, b = _rand(2, 3, 7), _rand(3, seed=1), _rand(3, seed=2)
    rm, rv = kiln.zeros(3, dtype="float64"), kiln.ones(3, dtype="float64")
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    ours = F.instance_norm(kiln.tensor(x), rm, rv, kiln.tensor(w), kiln.tensor(b), momentum=0.2)
    theirs = TF.instance_norm(torch.tensor(x), trm, trv, torch.tensor(w), torch.tensor(b), momentum=0.2)
    assert_close(ours, theirs, "float64")
    assert_close(rm, trm, "float64")
    assert_close(rv, trv, "float64")


# ---- PReLU, PixelShuffle ----------------------------------------------------------------------
@pytest.mark.parametrize("num_parameters,shape", [(1, (2, 3, 4)), (3, (2, 3, 4, 2)), (1, (5,)), (4, (6, 4))])
def test_prelu_matches_torch(num_parameters, shape):
    ours, theirs = nn.PReLU(num_parameters, init=0.1), torch.nn.PReLU(num_parameters, init=0.1)
    assert repr(ours) == repr(theirs) and ours.weight.shape == tuple(theirs.weight.shape)
    np.testing.assert_array_equal(ours.weight.detach().numpy(), theirs.weight.detach().numpy())
    with torch.no_grad():
        theirs.weight.uniform_(-0.5, 0.5)
    check_parity(ours, theirs, [_rand(*shape)], "float64")
    _compiled_equals_eager(ours, kiln.tensor(_rand(*shape), requires_grad=True))


def test_prelu_checks_the_weight():
    with pytest.raises(ValueError, match="3 slopes but the input has 4 channels"):
        F.prelu(kiln.zeros(2, 4), kiln.zeros(3))
    with pytest.raises(ValueError, match="scalar or 1-D"):
        F.prelu(kiln.zeros(2, 3), kiln.zeros(3, 1))
    assert F.prelu(kiln.tensor(-2.0), kiln.tensor([0.5])).shape == ()


@pytest.mark.parametrize("shape,r", [((2, 8, 3, 5), 2), ((9, 2, 2), 3), ((2, 2, 4, 1, 3), 2)])
def test_pixel_shuffle_and_unshuffle_match_torch(shape, r):
    shuffle, t_shuffle = nn.PixelShuffle(r), torch.nn.PixelShuffle(r)
    assert repr(shuffle) == repr(t_shuffle)
    check_parity(shuffle, t_shuffle, [_rand(*shape)], "float64")
    out_shape = tuple(t_shuffle(torch.zeros(shape)).shape)
    unshuffle, t_unshuffle = nn.PixelUnshuffle(r), torch.nn.PixelUnshuffle(r)
    assert repr(unshuffle) == repr(t_unshuffle)
    check_parity(unshuffle, t_unshuffle, [_rand(*out_shape)], "float64")
    x = _rand(*shape)
    np.testing.assert_array_equal(unshuffle(shuffle(kiln.tensor(x))).numpy(), x)
    _compiled_equals_eager(nn.Sequential(shuffle, unshuffle), kiln.tensor(x, requires_grad=True))


def test_pixel_shuffle_checks():
    with pytest.raises(ValueError, match="divisible by upscale_factor"):
        F.pixel_shuffle(kiln.zeros(2, 5, 3, 3), 2)
    with pytest.raises(ValueError, match="at least 3 dims"):
        F.pixel_shuffle(kiln.zeros(4, 3), 2)
    with pytest.raises(ValueError, match="divisible by downscale_factor"):
        F.pixel_unshuffle(kiln.zeros(2, 3, 5, 4), 2)
    with pytest.raises(ValueError, match="positive int"):
        F.pixel_shuffle(kiln.zeros(2, 4, 3, 3), 0)


# ---- EmbeddingBag -----------------------------------------------------------------------------
IDS = np.array([1, 2, 4, 5, 4, 3, 2, 9, 4, 4])
BAGS = [[0, 4, 4, 7], [0, 2, 8], [0, 0, 10], [0]]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("offsets", BAGS, ids=[str(b) for b in BAGS])
@pytest.mark.parametrize("padding_idx", [None, 4])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_with_offsets_matches_torch(mode, offsets, padding_idx, include_last_offset):
    if include_last_offset and len(offsets) == 1:
        offsets = [0, 10]
    kwargs = dict(mode=mode, padding_idx=padding_idx, include_last_offset=include_last_offset)
    ours, theirs = nn.EmbeddingBag(10, 3, **kwargs), torch.nn.EmbeddingBag(10, 3, **kwargs)
    assert repr(ours) == repr(theirs)
    check_parity(ours, theirs, [IDS, np.array(offsets)], "float64")


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_with_2d_input_matches_torch(mode, padding_idx):
    ours, theirs = nn.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx), \
        torch.nn.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx)
    check_parity(ours, theirs, [np.array([[1, 4, 4, 2, 1], [4, 4, 4, 4, 4], [9, 0, 3, 3, 4]])], "float64")


@pytest.mark.parametrize("two_d", [False, True])
def test_embedding_bag_per_sample_weights_match_torch(two_d):
    ids, offsets = (IDS.reshape(2, 5), None) if two_d else (IDS, np.array([0, 3, 3]))
    psw = _rand(*ids.shape, seed=3)
    ours, theirs = nn.EmbeddingBag(10, 3, mode="sum", padding_idx=2), torch.nn.EmbeddingBag(10, 3, mode="sum",
                                                                                             padding_idx=2)
    inputs = [ids] + ([] if two_d else [offsets])
    kwargs = {"per_sample_weights": psw}
    check_parity(ours, theirs, inputs, "float64", kwargs=kwargs)
    kp, tp = kiln.tensor(psw, requires_grad=True), torch.tensor(psw, requires_grad=True)
    k_extra = [kiln.tensor(offsets)] if offsets is not None else [None]
    t_extra = [torch.tensor(offsets)] if offsets is not None else [None]
    ours(kiln.tensor(ids), *k_extra, per_sample_weights=kp).sum().backward()
    theirs(torch.tensor(ids), *t_extra, per_sample_weights=tp).sum().backward()
    assert_close(kp.grad, tp.grad, "float64", "grad")


def test_embedding_bag_init_and_state_dict_follow_torch():
    bag = nn.EmbeddingBag(1000, 8, padding_idx=3)
    assert bag.weight.shape == (1000, 8) and not np.any(bag.weight.detach().numpy()[3])
    assert abs(float(bag.weight.detach().numpy().std()) - 1.0) < 0.05  # N(0, 1), as torch
    theirs = torch.nn.EmbeddingBag(1000, 8, padding_idx=3)
    assert list(bag.state_dict()) == list(theirs.state_dict())
    copy_weights(bag, theirs)
    frozen = nn.EmbeddingBag.from_pretrained(kiln.randn(5, 2), mode="sum")
    assert not frozen.weight.requires_grad and frozen.mode == "sum"


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_compiled_embedding_bag_equals_eager_and_reads_new_offsets(mode):
    bag = nn.EmbeddingBag(10, 4, mode=mode, padding_idx=4).to("float64")
    ids = kiln.tensor(IDS)
    _compiled_equals_eager(bag, ids, kiln.tensor([0, 4, 4, 7]))
    compiled = kiln.compile(bag)
    for offsets in ([0, 4, 4, 7], [0, 1, 5, 9], [0, 0, 0, 0]):  # same shapes, new values: one plan serves them
        np.testing.assert_array_equal(compiled(ids, kiln.tensor(offsets)).detach().numpy(),
                                      bag(ids, kiln.tensor(offsets)).detach().numpy())
    assert compiled.stats.fallbacks == 0


@pytest.mark.parametrize("call,kwargs,error", [
    ("1d_no_offsets", {}, ValueError),
    ("2d_with_offsets", {}, ValueError),
    ("bad_first_offset", {}, ValueError),
    ("offset_past_end", {}, ValueError),
    ("bad_mode", {"mode": "median"}, ValueError),
    ("weights_with_mean", {"mode": "mean"}, NotImplementedError),
    ("float_ids", {}, TypeError),
])
def test_embedding_bag_rejects_what_torch_rejects(call, kwargs, error):
    w = np.zeros((10, 3))
    args = {
        "1d_no_offsets": (IDS, None, None), "2d_with_offsets": (IDS.reshape(2, 5), [0, 1], None),
        "bad_first_offset": (IDS, [1, 4], None), "offset_past_end": (IDS, [0, 11], None),
        "bad_mode": (IDS, [0, 4], None), "weights_with_mean": (IDS, [0, 4], np.ones(10)),
        "float_ids": (IDS.astype(float), [0, 4], None),
    }[call]

    def run(lib, fn):
        ids, offsets, psw = args
        return fn(lib.tensor(ids), lib.tensor(w), None if offsets is None else lib.tensor(offsets),
                  per_sample_weights=None if psw is None else lib.tensor(psw), **kwargs)

    got = _same_error(lambda: run(kiln, F.embedding_bag), lambda: run(torch, TF.embedding_bag))
    assert issubclass(got, error)


# ---- DataParallel -----------------------------------------------------------------------------
def test_data_parallel_on_the_cpu_runs_the_module_as_torch_does():
    assert nn.DataParallel is nn.parallel.DataParallel
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).to("float64")
    theirs = torch.nn.DataParallel(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(),
                                                       torch.nn.Linear(3, 2)).double())
    wrapped = nn.DataParallel(model)
    assert wrapped.module is model and wrapped.device_ids == [] and wrapped.dim == 0
    assert list(wrapped.state_dict()) == list(theirs.state_dict())
    wrapped.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = _rand(5, 4)
    check_parity(wrapped, theirs, [x], "float64")
    assert repr(wrapped).startswith("DataParallel(\n  (module): Sequential(")
    _compiled_equals_eager(wrapped, kiln.tensor(x, requires_grad=True))
    wrapped_compiled = nn.DataParallel(kiln.compile(model))
    np.testing.assert_array_equal(wrapped_compiled(kiln.tensor(x)).detach().numpy(),
                                  model(kiln.tensor(x)).detach().numpy())
    with pytest.raises(TypeError, match="nn.Module"):
        nn.DataParallel(lambda x: x)


def test_data_parallel_with_several_gpus_warns_once_and_uses_the_first(monkeypatch):
    from kiln.nn.parallel import data_parallel

    monkeypatch.setattr(data_parallel, "gpu_count", lambda: 2)
    monkeypatch.setattr(data_parallel, "_warned_several", False)
    moved = []
    model = nn.Linear(2, 2)
    monkeypatch.setattr(model, "to", lambda device: moved.append(device) or model)
    with pytest.warns(UserWarning, match="DistributedDataParallel"):
        wrapped = nn.DataParallel(model)
    assert wrapped.device_ids == [0, 1] and wrapped.output_device == 0 and moved == ["cuda:0"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.DataParallel(model, device_ids=["cuda:1", 0], output_device=torch.device("cuda:1"))
    assert moved[-1] == "cuda:1"


# ---- activations ------------------------------------------------------------------------------
ACTIVATIONS = [("ELU", ()), ("ELU", (0.5,)), ("CELU", ()), ("CELU", (0.7,)), ("SELU", ()), ("GLU", ()),
               ("GLU", (1,)), ("Hardtanh", ()), ("Hardtanh", (-2.0, 0.5)), ("ReLU6", ()), ("Hardswish", ()),
               ("Hardsigmoid", ()), ("Mish", ()), ("Softsign", ()), ("Tanhshrink", ()), ("Threshold", (0.1, -2.0))]


# PyTorch's float64 gradients of these are off by up to ~3e-8 relative (hardsigmoid scales by a float32 1/6,
# celu rebuilds exp(x / alpha) from its output), so they are compared in float32, where both are exact enough
ROUGH_TORCH_GRADS = {"celu", "hardsigmoid"}


@pytest.mark.parametrize("name,args", ACTIVATIONS, ids=[f"{n}{a}" for n, a in ACTIVATIONS])
def test_activation_layers_match_torch(name, args):
    ours, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(ours) == repr(theirs)
    x = _rand(3, 4, 6, scale=4.0)
    check_parity(ours, theirs, [x], "float32" if name.lower() in ROUGH_TORCH_GRADS else "float64")
    _compiled_equals_eager(ours.to("float64"), kiln.tensor(x, requires_grad=True))


FUNCTIONAL = [("relu6", ()), ("hardsigmoid", ()), ("hardswish", ()), ("selu", ()), ("celu", (0.5,)),
              ("softsign", ()), ("tanhshrink", ()), ("threshold", (0.5, 3.0)), ("glu", (-1,))]


@pytest.mark.parametrize("name,args", FUNCTIONAL, ids=[n for n, _ in FUNCTIONAL])
def test_functional_activations_match_torch(name, args):
    dtype = "float32" if name in ROUGH_TORCH_GRADS else "float64"
    x = _rand(5, 6, scale=4.0)
    kx, tx = kiln.tensor(x, dtype=dtype, requires_grad=True), torch.tensor(x, dtype=getattr(torch, dtype),
                                                                           requires_grad=True)
    ours, theirs = getattr(F, name)(kx, *args), getattr(TF, name)(tx, *args)
    assert ours.dtype.name == dtype
    assert_close(ours, theirs, dtype)
    ours.sum().backward()
    theirs.sum().backward()
    assert_close(kx.grad, tx.grad, dtype, "grad")


def test_activation_argument_checks():
    with pytest.raises(ValueError, match="even size"):
        F.glu(kiln.zeros(2, 5), 1)
    with pytest.raises(ValueError, match="0-d"):
        F.glu(kiln.tensor(1.0))
    with pytest.raises(ValueError, match="max_val must be greater"):
        nn.Hardtanh(2.0, 1.0)
    with pytest.raises(ValueError, match="alpha cannot be 0"):
        F.celu(kiln.zeros(3), 0.0)
    assert repr(nn.ReLU6(inplace=True)) == repr(torch.nn.ReLU6(inplace=True))
    assert isinstance(nn.ReLU6(), nn.Hardtanh)
