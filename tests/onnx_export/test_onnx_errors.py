"""kiln.onnx.export errors: unsupported ops name the op, and bad programs or arguments say what to fix."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import kiln
from kiln.onnx import ExportError, UnsupportedOpError

onnx = pytest.importorskip("onnx", reason="pip install kiln[onnx] to run the ONNX export tests")


def test_random_op_raises_unsupported_op_error_naming_op_and_line():
    def noisy(x):
        return x + kiln.rand(3)

    with pytest.raises(UnsupportedOpError, match="primitive 'uniform' has no ONNX mapping") as info:
        kiln.onnx.export(noisy, kiln.randn(3), None)
    assert info.value.op == "uniform"
    assert "= uniform[shape=(3,)" in info.value.line
    assert "at: " in str(info.value) and "Fix:" in str(info.value)


def test_dropout_in_train_mode_is_not_exported_because_export_uses_eval_mode():
    model = kiln.nn.Sequential(kiln.nn.Linear(4, 4), kiln.nn.Dropout(0.5)).train()
    exported = kiln.onnx.export(model, kiln.randn(2, 4), None)
    assert "uniform" not in {n.op_type.lower() for n in exported.graph.node}


def test_functional_dropout_with_training_true_names_the_random_op():
    with pytest.raises(UnsupportedOpError, match="'uniform'.*eval mode"):
        kiln.onnx.export(lambda x: kiln.nn.functional.dropout(x, 0.5, training=True), kiln.randn(4), None)


def test_boolean_mask_index_is_a_data_dependent_shape():
    with pytest.raises(ExportError, match=r"`nonzero` on a traced tensor.*kiln.where"):
        kiln.onnx.export(lambda x: x[x > 0], kiln.randn(5), None)


def test_two_tensor_indices_are_unsupported():
    idx = kiln.tensor([0, 1])
    with pytest.raises(UnsupportedOpError, match="2 tensor indices"):
        kiln.onnx.export(lambda x: x[idx, idx], kiln.randn(3, 3), None)


def test_backward_only_op_is_unsupported(monkeypatch):
    import kiln.onnx.ops as ops

    monkeypatch.delitem(ops.LOWERINGS, "cumsum")
    with pytest.raises(UnsupportedOpError, match="'cumsum' has no ONNX mapping") as info:
        kiln.onnx.export(lambda x: x.cumsum(0) * 2.0, kiln.randn(3), None)
    assert info.value.line.startswith("b:f32[3] = cumsum[axis=0] a")


# These functions turn the symbolic batch size into a Python int on purpose: the export must catch the baked
# size, and kiln's one-time dynamic_dims warning about the conversion (tested in tests/jit) is expected here.
_BAKED_SIZE_WARNING = r"ignore:dynamic_dims. the symbolic size batch:RuntimeWarning"


def test_data_dependent_python_branch_is_an_export_error():
    def branchy(x):
        return x * 2 if x.sum() > 0 else x

    with pytest.raises(ExportError, match=r"`bool` on a traced tensor at .*test_onnx_errors.py.*kiln.where"):
        kiln.onnx.export(branchy, kiln.randn(3), None)


@pytest.mark.filterwarnings(_BAKED_SIZE_WARNING)
def test_baked_dynamic_dim_is_detected():
    def mean_rows(x):
        return x.sum(0) / len(x)  # len() is a plain int: the example's size

    with pytest.raises(ExportError, match=r"baked into the graph at a constant of shape f32\[\]") as info:
        kiln.onnx.export(mean_rows, kiln.randn(4, 3), None, dynamic_dims={0: {0: "batch"}})
    assert "batch=4 then 5" in str(info.value)


@pytest.mark.filterwarnings(_BAKED_SIZE_WARNING)
def test_baked_dim_in_node_params_names_the_node():
    def add_positions(x):
        return x.sum() + kiln.arange(len(x) * 20).float().sum()  # len() is the example's size

    with pytest.raises(ExportError, match=r"baked into the graph at `.*arange\[start=0 stop=80 "):
        kiln.onnx.export(add_positions, kiln.randn(4, 3), None, dynamic_dims={0: {0: "batch"}})


@pytest.mark.filterwarnings(_BAKED_SIZE_WARNING)
def test_a_size_that_coincides_at_one_other_size_is_still_caught():
    def first_half(x):
        return x[: len(x) // 2]  # 4 // 2 == 5 // 2: a second size is needed to see the baked 2

    with pytest.raises(ExportError, match="baked into the graph"):
        kiln.onnx.export(first_half, kiln.randn(4, 3), None, dynamic_dims={0: {0: "batch"}})


def _check_at_two_sizes(fn):
    from onnx_helpers import kiln_outputs, run_onnx

    exported = kiln.onnx.export(fn, kiln.randn(4, 6), None, dynamic_dims={0: {0: "batch"}})
    for rows in (4, 7):
        x = kiln.randn(rows, 6)
        np.testing.assert_allclose(run_onnx(exported, x.numpy())[0], kiln_outputs(fn, (x,))[0], rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("fn", [lambda x: x.mean(0), lambda x: x * x.shape[0], lambda x: x / (x.shape[0] * 2),
                                lambda x: x - x.shape[0] / 3, lambda x: x.reshape(x.shape[0] * 2, -1),
                                lambda x: kiln.zeros(x.shape[0], 2) + x.sum(1, keepdim=True),
                                lambda x: x.t().reshape(-1)])
def test_values_computed_from_dynamic_dims_are_computed_at_run_time(fn):
    pytest.importorskip("onnxruntime")
    _check_at_two_sizes(fn)


@pytest.mark.parametrize("fn", [lambda x: x[: x.shape[0] // 2],
                                lambda x: x + kiln.arange(x.shape[0]).float()[:, None]])
def test_dynamic_dims_kiln_cannot_follow_yet_are_refused_not_baked(fn):
    """Symbolic slice bounds and arange lengths: exported correctly, or refused; never wrong."""
    pytest.importorskip("onnxruntime")
    try:
        _check_at_two_sizes(fn)
    except ExportError as exc:
        assert "baked into the graph" in str(exc)


def test_dim_computed_from_shape_stays_dynamic():
    pytest.importorskip("onnxruntime")
    from onnx_helpers import run_onnx

    def flatten_pairs(x):
        return x.reshape(x.shape[0] * 2, x.shape[1] // 2)

    exported = kiln.onnx.export(flatten_pairs, kiln.randn(3, 4), None, dynamic_dims={0: {0: "n"}})
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_array_equal(run_onnx(exported, x)[0], x.reshape(10, 2))


def test_model_that_rejects_other_sizes_says_so():
    def only_three(x):
        if x.shape[0] != 3:
            raise ValueError("need 3 rows")
        return x * 2

    with pytest.raises(ExportError, match=r"(?s)could not trace the model again.*need 3 rows"):
        kiln.onnx.export(only_three, kiln.randn(3, 2), None, dynamic_dims={0: {0: "n"}})


def test_in_place_update_of_outside_state_is_an_export_error():
    counter = kiln.zeros(1)

    def counting(x):
        counter.add_(1.0)
        return x * 2

    with pytest.raises(ExportError, match="updates tensors in place"):
        kiln.onnx.export(counting, kiln.randn(2), None)


@pytest.mark.parametrize("kw, error, match", [
    (dict(opset=11), ValueError, "opset must be an int from 13"),
    (dict(opset=999), ValueError, "opset must be an int from 13"),
    (dict(dynamic_dims={1: {0: "b"}}), ValueError, r"names argument 1.*tensors at positions \[0\]"),
    (dict(dynamic_dims={0: {5: "b"}}), ValueError, r"names dim 5.*shape \(2, 3\)"),
    (dict(dynamic_dims={0: {0: "not a name"}}), ValueError, "must be an identifier"),
    (dict(dynamic_dims=[0]), ValueError, "must be a dict"),
    (dict(input_names=["a", "b"]), ValueError, "input_names must be 1 distinct"),
    (dict(output_names=["x"], input_names=["x"]), ValueError, "input and output names must differ"),
])
def test_bad_arguments(kw, error, match):
    with pytest.raises(error, match=match):
        kiln.onnx.export(lambda x: x + 1.0, kiln.randn(2, 3), None, **kw)


def test_not_callable_and_bad_example_args():
    with pytest.raises(TypeError, match="expects an nn.Module or a function, got int"):
        kiln.onnx.export(42, kiln.randn(2), None)
    with pytest.raises(TypeError, match="example_args must be a Tensor or a tuple"):
        kiln.onnx.export(lambda x: x, np.ones(2), None)


def test_same_tensor_twice_is_rejected():
    x = kiln.randn(2)
    with pytest.raises(ValueError, match="argument 1 is the same tensor"):
        kiln.onnx.export(lambda a, b: a + b, (x, x), None)


def test_missing_onnx_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"pip install onnx.*kiln\[onnx\]"):
        kiln.onnx.export(lambda x: x, kiln.randn(2), None)
