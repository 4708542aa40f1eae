"""Export kiln.models (MLP, LeNet-5, GPT) to ONNX and run them in onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="pip install kiln[onnx] to run the ONNX export tests")
pytest.importorskip("onnxruntime", reason="pip install kiln[onnx] to run the ONNX export tests")

import onnx  # noqa: E402

import kiln  # noqa: E402
from onnx_helpers import assert_export_matches, kiln_outputs, run_onnx  # noqa: E402


def _gpt() -> kiln.nn.Module:
    return kiln.models.gpt(vocab=17, n_layer=2, n_head=2, d_model=16, block_size=8).eval()


def test_mlp_runs_in_onnxruntime(tmp_path):
    model = kiln.models.mlp().eval()
    x = kiln.randn(4, 784)
    kiln.onnx.export(model, x, tmp_path / "mlp.onnx")
    loaded = onnx.load(str(tmp_path / "mlp.onnx"))
    onnx.checker.check_model(loaded)
    np.testing.assert_allclose(run_onnx(loaded, x.numpy())[0], kiln_outputs(model, (x,))[0], rtol=1e-4, atol=1e-5)


def test_parameters_become_named_initializers():
    model = kiln.models.mlp(8, (4,), 2).eval()
    exported = kiln.onnx.export(model, kiln.randn(1, 8), None)
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in exported.graph.initializer}
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(initializers[name], tensor.numpy())
    assert [i.name for i in exported.graph.input] == ["input_0"]
    assert [o.name for o in exported.graph.output] == ["output_0"]
    assert exported.producer_name == "kiln"


def test_lenet_5_runs_in_onnxruntime_as_conv_and_max_pool():
    model = kiln.models.lenet_5().eval()
    exported = assert_export_matches(model, kiln.randn(3, 1, 32, 32))
    ops = [n.op_type for n in exported.graph.node]
    assert ops.count("Conv") == 2 and ops.count("MaxPool") == 2
    assert "Gather" not in ops  # no generic im2col left


def test_gpt_runs_in_onnxruntime():
    model = _gpt()
    idx = kiln.randint(0, 17, (2, 8))
    assert_export_matches(model, idx)


def test_gpt_shorter_sequence():
    assert_export_matches(_gpt(), kiln.randint(0, 17, (3, 5)))


def test_export_leaves_the_model_in_its_training_mode():
    model = kiln.models.mlp(8, (4,), 2, dropout=0.5)
    model.train()
    exported = kiln.onnx.export(model, kiln.randn(2, 8), None)  # traced in eval mode: no dropout
    assert model.training and all(m.training for m in model.modules())
    x = kiln.randn(2, 8)
    model.eval()
    np.testing.assert_allclose(run_onnx(exported, x.numpy())[0], kiln_outputs(model, (x,))[0], rtol=1e-4,
                               atol=1e-6)


# ---- dynamic dims ---------------------------------------------------------------------
def test_mlp_dynamic_batch():
    model = kiln.models.mlp().eval()
    exported = assert_export_matches(model, kiln.randn(2, 784), dynamic_dims={0: {0: "batch"}},
                                     run_args=(kiln.randn(7, 784),))
    dims = exported.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 784
    assert exported.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.parametrize("name, shape", [("mlp", (1, 784)), ("lenet_5", (1, 1, 32, 32))])
def test_example_batch_of_one_still_gives_a_dynamic_batch(name, shape):
    model = getattr(kiln.models, name)().eval()
    exported = kiln.onnx.export(model, kiln.randn(*shape), None, dynamic_dims={0: {0: "batch"}})
    for batch in (1, 6):
        x = kiln.randn(batch, *shape[1:])
        np.testing.assert_allclose(run_onnx(exported, x.numpy())[0], kiln_outputs(model, (x,))[0],
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 5])
def test_lenet_5_dynamic_batch(batch):
    model = kiln.models.lenet_5().eval()
    exported = kiln.onnx.export(model, kiln.randn(2, 1, 32, 32), None, dynamic_dims={0: {0: "N"}})
    x = kiln.randn(batch, 1, 32, 32)
    np.testing.assert_allclose(run_onnx(exported, x.numpy())[0], kiln_outputs(model, (x,))[0],
                               rtol=1e-4, atol=1e-5)


def test_gpt_dynamic_batch():
    model = _gpt()
    try:
        exported = kiln.onnx.export(model, kiln.randint(0, 17, (2, 8)), None, dynamic_dims={0: {0: "B"}})
    except kiln.onnx.ExportError as exc:
        # kiln's tracer loses the symbolic batch at the embedding lookup (Index's shape rule is
        # NumPy-based); the exporter proves it and refuses instead of writing a fixed-size model
        assert "baked into the graph" in str(exc) and "index" in str(exc)
        pytest.xfail("dynamic batch through GPT needs symbolic shapes through `index` in kiln.jit")
    x = kiln.randint(0, 17, (5, 8))
    np.testing.assert_allclose(run_onnx(exported, x.numpy())[0], kiln_outputs(model, (x,))[0],
                               rtol=1e-4, atol=1e-5)


def test_custom_input_and_output_names():
    def f(x, y):
        return x + y, x * y

    exported = assert_export_matches(f, kiln.randn(2, 3), kiln.randn(2, 3), input_names=["a", "b"],
                                     output_names=["sum", "product"])
    assert [i.name for i in exported.graph.input] == ["a", "b"]
    assert [o.name for o in exported.graph.output] == ["sum", "product"]
