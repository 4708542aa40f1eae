"""nn.Module mechanics: registration, traversal, modes, grads, state dicts, dtype moves, hooks, repr."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import kiln
import kiln.nn as nn


class TwoLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(3, 2)
        self.scale = nn.Parameter(kiln.ones(2))
        self.register_buffer("steps", kiln.zeros(1))
        self.register_buffer("cache", kiln.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


# ---- Parameter ---------------------------------------------------------------------------
def test_parameter_defaults_and_repr():
    p = nn.Parameter(kiln.tensor([1.0, 2.0]))
    assert isinstance(p, kiln.Tensor) and p.requires_grad and p.is_leaf
    assert repr(p).startswith("Parameter containing:\ntensor([1., 2.]")
    assert not nn.Parameter(kiln.zeros(2), requires_grad=False).requires_grad
    assert nn.Parameter().shape == (0,)


def test_parameter_shares_memory_and_ops_return_tensors():
    t = kiln.zeros(3)
    p = nn.Parameter(t)
    with kiln.no_grad():
        p.add_(1.0)
    np.testing.assert_array_equal(t.numpy(), [1, 1, 1])
    out = p * 2
    assert type(out) is kiln.Tensor and out.grad_fn is not None


def test_parameter_deepcopy_and_pickle_keep_type():
    p = nn.Parameter(kiln.tensor([1.0, 2.0]))
    for clone in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert isinstance(clone, nn.Parameter) and clone.requires_grad
        np.testing.assert_array_equal(clone.detach().numpy(), [1.0, 2.0])
        with kiln.no_grad():
            clone.zero_()
        assert p.detach().numpy()[0] == 1.0


def test_parameter_gets_gradients():
    p = nn.Parameter(kiln.tensor([1.0, -2.0]))
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [2.0, -4.0])


# ---- registration and traversal ------------------------------------------------------------
def test_named_parameters_buffers_children_modules():
    m = TwoLayer()
    assert [n for n, _ in m.named_parameters()] == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [n for n, _ in m.named_parameters(recurse=False)] == ["scale"]
    assert [n for n, _ in m.named_buffers()] == ["steps", "cache"]
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "fc2"]
    assert [n for n, _ in m.named_modules()] == ["", "fc1", "act", "fc2"]
    assert list(m.children())[0] is m.fc1
    assert len(list(m.parameters())) == 5
    assert [n for n, _ in m.named_parameters(prefix="net")][0] == "net.scale"


def test_shared_parameters_and_modules_are_listed_once():
    m = nn.Module()
    shared = nn.Linear(2, 2)
    m.a = shared
    m.b = shared
    m.w = shared.weight  # the same Parameter object registered directly as well
    assert len(list(m.parameters())) == 2
    assert [n for n, _ in m.named_modules()] == ["", "a"]
    assert len(list(m.named_parameters(remove_duplicate=False))) == 5
    assert list(m.state_dict()) == ["w", "a.weight", "a.bias", "b.weight", "b.bias"]


def test_setattr_routes_and_reassignment():
    m = TwoLayer()
    m.fc1 = nn.Linear(4, 3, bias=False)
    assert m.fc1.bias is None and "fc1.bias" not in dict(m.named_parameters())
    m.scale = None
    assert m.scale is None and "scale" not in m.state_dict()
    m.steps = kiln.ones(1)
    assert m.steps.numpy()[0] == 1.0 and "steps" in m.state_dict()
    m.plain = 3
    assert m.plain == 3 and "plain" not in m.state_dict()
    m.fc2 = None
    assert [n for n, _ in m.named_children()] == ["fc1", "act"]


def test_assignment_type_errors():
    m = TwoLayer()
    with pytest.raises(TypeError, match=r"cannot assign 'Tensor' as parameter 'scale'.*nn.Parameter"):
        m.scale = kiln.ones(2)
    with pytest.raises(TypeError, match="cannot assign 'int' as child module 'fc1'"):
        m.fc1 = 3
    with pytest.raises(TypeError, match="cannot assign 'int' as buffer 'steps'"):
        m.steps = 3
    with pytest.raises(TypeError, match="to parameter 'w'"):
        m.register_parameter("w", kiln.ones(2))
    with pytest.raises(KeyError, match="must be non-empty and contain no"):
        m.register_buffer("a.b", kiln.ones(1))
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        m.register_buffer("forward", kiln.ones(1))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("x", kiln.ones(1))


def test_forgetting_super_init_is_explained():
    class Broken(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Broken()


def test_getattr_error_names_the_class_and_attribute():
    with pytest.raises(AttributeError, match="'TwoLayer' object has no attribute 'fc3'"):
        TwoLayer().fc3


def test_delattr_removes_from_registries():
    m = TwoLayer()
    del m.fc1
    del m.scale
    del m.steps
    assert "fc1" not in dict(m.named_children())
    assert list(m.state_dict()) == ["fc2.weight", "fc2.bias"]


def test_get_submodule_parameter_buffer():
    m = nn.Sequential(TwoLayer())
    assert m.get_submodule("0.fc1") is m[0].fc1
    assert m.get_parameter("0.fc2.bias") is m[0].fc2.bias
    assert m.get_buffer("0.steps") is m[0].steps
    with pytest.raises(AttributeError, match="no submodule 'nope'"):
        m.get_submodule("0.nope")


def test_forward_missing():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


# ---- modes and grads -------------------------------------------------------------------------
def test_train_eval_recurse():
    m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout()))
    assert all(x.training for x in m.modules())
    assert m.eval() is m
    assert not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    with pytest.raises(ValueError, match="expected to be a bool"):
        m.train("yes")


def test_zero_grad():
    m = TwoLayer()
    m(kiln.randn(5, 4)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not np.any(p.grad.numpy()) for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_requires_grad_():
    m = TwoLayer().requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


# ---- state dicts -----------------------------------------------------------------------------
def test_state_dict_contents_and_sharing():
    m = TwoLayer()
    sd = m.state_dict()
    assert list(sd) == ["scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert not sd["scale"].requires_grad
    with kiln.no_grad():
        m.fc1.weight.fill_(7.0)
    assert sd["fc1.weight"].numpy()[0, 0] == 7.0  # shares memory
    assert m.state_dict(keep_vars=True)["scale"] is m.scale


def test_load_state_dict_copies_in_place_and_round_trips():
    src, dst = TwoLayer(), TwoLayer()
    weight_before = dst.fc1.weight
    version_before = weight_before._version
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert dst.fc1.weight is weight_before and weight_before._version > version_before
    for key, value in src.state_dict().items():
        np.testing.assert_array_equal(dst.state_dict()[key].numpy(), value.numpy())
    assert dst.fc1.weight.requires_grad and dst.fc1.weight.is_leaf


def test_load_state_dict_accepts_numpy_and_casts():
    m = nn.Linear(2, 2).double()
    m.load_state_dict({"weight": np.eye(2, dtype=np.float32), "bias": [1.0, 2.0]})
    assert m.weight.dtype == kiln.float64
    np.testing.assert_array_equal(m.weight.detach().numpy(), np.eye(2))


def test_load_state_dict_reports_everything_at_once():
    m = nn.Linear(4, 3)
    bad = {"weight": np.zeros((3, 5)), "extra": np.zeros(1), "other": np.zeros(1)}
    with pytest.raises(RuntimeError) as info:
        m.load_state_dict(bad)
    msg = str(info.value)
    assert msg.startswith("Error(s) in loading state_dict for Linear:")
    assert 'Missing key(s) in state_dict: "bias".' in msg
    assert 'Unexpected key(s) in state_dict: "extra", "other".' in msg
    assert ("size mismatch for weight: copying a param with shape (3, 5) from checkpoint, "
            "the shape in current model is (3, 4).") in msg
    assert "strict=False" in msg
    assert not np.any(m.weight.detach().numpy() == 0)  # nothing was loaded


def test_load_state_dict_non_strict():
    m = nn.Linear(4, 3)
    result = m.load_state_dict({"weight": np.zeros((3, 4)), "extra": np.zeros(1)}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]
    assert not np.any(m.weight.detach().numpy())
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        m.load_state_dict({"weight": np.zeros((2, 4))}, strict=False)


def test_load_state_dict_rejects_non_mapping():
    with pytest.raises(TypeError, match="expects a mapping"):
        nn.Linear(2, 2).load_state_dict([1, 2])


def test_load_state_dict_keeps_optimizer_references_valid():
    m = nn.Linear(3, 1)
    params = list(m.parameters())
    m.load_state_dict({"weight": np.ones((1, 3)), "bias": np.zeros(1)})
    assert [id(p) for p in m.parameters()] == [id(p) for p in params]
    np.testing.assert_array_equal(params[0].detach().numpy(), np.ones((1, 3)))


# ---- dtype / device / apply ------------------------------------------------------------------
def test_to_dtype_keeps_identity_and_skips_int_buffers():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    w = m[0].weight
    m(kiln.randn(4, 3)).sum().backward()
    assert m.double() is m
    assert m[0].weight is w and w.dtype == kiln.float64 and w.grad.dtype == kiln.float64
    assert m[1].running_mean.dtype == kiln.float64
    assert m[1].num_batches_tracked.dtype == kiln.int64
    out = m(kiln.randn(4, 3, dtype=kiln.float64))
    assert out.dtype == kiln.float64
    m.to(kiln.float32)
    assert w.dtype == kiln.float32
    m.to("cpu")
    m.to(device="cpu", dtype="float64")
    assert w.dtype == kiln.float64
    with pytest.raises(TypeError, match="only accepts floating point dtypes"):
        m.to(kiln.int64)


def test_apply_visits_children_first():
    m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    seen = []
    assert m.apply(lambda mod: seen.append(type(mod).__name__)) is m
    assert seen == ["Linear", "ReLU", "Sequential", "Sequential"]

    def init(mod):
        if isinstance(mod, nn.Linear):
            nn.init.zeros_(mod.weight)

    m.apply(init)
    assert not np.any(m[0].weight.detach().numpy())


def test_deepcopy_module():
    m = TwoLayer()
    clone = copy.deepcopy(m)
    assert isinstance(clone.fc1.weight, nn.Parameter)
    with kiln.no_grad():
        clone.fc1.weight.zero_()
    assert np.any(m.fc1.weight.detach().numpy())
    x = kiln.randn(2, 4)
    np.testing.assert_array_equal(copy.deepcopy(m)(x).detach().numpy(), m(x).detach().numpy())


# ---- hooks -----------------------------------------------------------------------------------
def test_forward_pre_hook_replaces_input_and_removes():
    m = nn.Identity()
    handle = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    x = kiln.tensor([1.0, 2.0])
    np.testing.assert_array_equal(m(x).numpy(), [2.0, 4.0])
    handle.remove()
    np.testing.assert_array_equal(m(x).numpy(), [1.0, 2.0])
    handle.remove()  # twice is harmless


def test_forward_pre_hook_non_tuple_return_is_wrapped():
    m = nn.Linear(2, 2)
    m.register_forward_pre_hook(lambda mod, args: kiln.zeros(1, 2))
    np.testing.assert_allclose(m(kiln.ones(1, 2)).detach().numpy(), m.bias.detach().numpy()[None])


def test_forward_hook_replaces_output_and_sees_args():
    m = nn.ReLU()
    calls = []

    def hook(mod, args, output):
        calls.append((mod, args, output))
        return output + 1

    handle = m.register_forward_hook(hook)
    x = kiln.tensor([-1.0, 2.0])
    np.testing.assert_array_equal(m(x).numpy(), [1.0, 3.0])
    assert calls[0][0] is m and calls[0][1][0] is x
    handle.remove()
    np.testing.assert_array_equal(m(x).numpy(), [0.0, 2.0])


def test_hook_none_return_keeps_values_and_order():
    m = nn.Identity()
    order = []
    m.register_forward_pre_hook(lambda mod, args: order.append("pre1"))
    m.register_forward_pre_hook(lambda mod, args: order.append("pre0"), prepend=True)
    m.register_forward_hook(lambda mod, args, out: order.append("post"))
    x = kiln.ones(1)
    assert m(x) is x
    assert order == ["pre0", "pre1", "post"]


def test_hooks_with_kwargs():
    m = nn.MultiheadAttention(4, 1, batch_first=True)

    def pre(mod, args, kwargs):
        return args, {**kwargs, "need_weights": False}

    m.register_forward_pre_hook(pre, with_kwargs=True)
    seen = {}
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.update(kwargs), with_kwargs=True)
    x = kiln.randn(1, 3, 4)
    assert m(x, x, x, need_weights=True)[1] is None
    assert seen == {"need_weights": False}


def test_hook_handle_as_context_manager():
    m = nn.Identity()
    with m.register_forward_hook(lambda mod, args, out: out * 0):
        assert m(kiln.ones(1)).numpy()[0] == 0
    assert m(kiln.ones(1)).numpy()[0] == 1


def test_hooks_run_inside_containers():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    shapes = []
    model[0].register_forward_hook(lambda mod, args, out: shapes.append(tuple(out.shape)))
    model(kiln.randn(5, 3))
    assert shapes == [(5, 3)]


# ---- structure version -------------------------------------------------------------------------
def test_structure_version_changes_on_structure_only():
    m = nn.Sequential(nn.Linear(2, 2))
    versions = [m.structure_version()]

    def changed() -> bool:
        versions.append(m.structure_version())
        return versions[-1] > versions[-2]

    m(kiln.randn(1, 2)).sum().backward()
    with kiln.no_grad():
        m[0].weight.add_(1.0)
    m.train(False)
    assert not changed()
    m[0].register_buffer("b", kiln.zeros(1))
    assert changed()
    m[0].extra = nn.Parameter(kiln.zeros(1))
    assert changed()
    m[0].extra = nn.Parameter(kiln.zeros(1))  # replaced
    assert changed()
    del m[0].extra
    assert changed()
    m.append(nn.ReLU())
    assert changed()
    handle = m[1].register_forward_hook(lambda *a: None)
    assert changed()
    handle.remove()
    assert changed()
    m[1] = nn.Tanh()
    assert changed()
    m[0].b = kiln.ones(1)  # buffer replaced by a new tensor
    assert changed()


# ---- repr ------------------------------------------------------------------------------------
def test_repr_matches_pytorch_for_common_layers():
    torch = pytest.importorskip("torch")
    pairs = [
        (nn.Linear(784, 256), torch.nn.Linear(784, 256)),
        (nn.Linear(3, 2, bias=False), torch.nn.Linear(3, 2, bias=False)),
        (nn.Conv2d(1, 6, 5), torch.nn.Conv2d(1, 6, 5)),
        (nn.Conv2d(4, 8, 3, stride=2, padding=1, dilation=2, groups=2, bias=False),
         torch.nn.Conv2d(4, 8, 3, stride=2, padding=1, dilation=2, groups=2, bias=False)),
        (nn.Conv2d(4, 8, 3, padding="same"), torch.nn.Conv2d(4, 8, 3, padding="same")),
        (nn.Conv1d(4, 8, 3), torch.nn.Conv1d(4, 8, 3)),
        (nn.MaxPool2d(2), torch.nn.MaxPool2d(2)),
        (nn.AvgPool2d(3, 2, 1), torch.nn.AvgPool2d(3, 2, 1)),
        (nn.AdaptiveAvgPool2d((1, 1)), torch.nn.AdaptiveAvgPool2d((1, 1))),
        (nn.BatchNorm2d(16), torch.nn.BatchNorm2d(16)),
        (nn.BatchNorm1d(4, momentum=None, affine=False), torch.nn.BatchNorm1d(4, momentum=None, affine=False)),
        (nn.LayerNorm(64), torch.nn.LayerNorm(64)),
        (nn.Embedding(10, 3, padding_idx=0), torch.nn.Embedding(10, 3, padding_idx=0)),
        (nn.Dropout(0.1), torch.nn.Dropout(0.1)),
        (nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh")),
        (nn.LeakyReLU(0.2), torch.nn.LeakyReLU(0.2)),
        (nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
        (nn.Flatten(), torch.nn.Flatten()),
        (nn.Bilinear(2, 3, 4), torch.nn.Bilinear(2, 3, 4)),
        (nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()),
        (nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Sequential(nn.Linear(256, 10), nn.Identity())),
         torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                             torch.nn.Sequential(torch.nn.Linear(256, 10), torch.nn.Identity()))),
        (nn.ModuleDict({"a": nn.ReLU()}), torch.nn.ModuleDict({"a": torch.nn.ReLU()})),
    ]
    for ours, theirs in pairs:
        assert repr(ours) == repr(theirs)


def test_repr_of_custom_module():
    assert repr(TwoLayer()) == (
        "TwoLayer(\n"
        "  (fc1): Linear(in_features=4, out_features=3, bias=True)\n"
        "  (act): ReLU()\n"
        "  (fc2): Linear(in_features=3, out_features=2, bias=True)\n"
        ")"
    )


def test_compile_method_exists():
    assert callable(nn.Module.compile)


def test_nn_functional_reexports():
    import kiln.nn.functional as F

    for name in ("relu", "gelu", "softmax", "cross_entropy", "conv2d", "linear", "pad", "layer_norm",
                 "scaled_dot_product_attention", "dropout", "embedding", "matmul", "zeros"):
        assert callable(getattr(F, name)), name
    assert F.relu is kiln.relu


def test_pickle_module_round_trip():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    model(kiln.randn(5, 3))
    clone = pickle.loads(pickle.dumps(model))
    assert isinstance(clone[0].weight, nn.Parameter)
    assert clone[1].num_batches_tracked.item() == 1
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(clone.state_dict()[key].numpy(), value.numpy())
