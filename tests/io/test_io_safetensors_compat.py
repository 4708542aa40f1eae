"""Files move between kiln and the reference `safetensors` package, and from PyTorch models."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import kiln

st_numpy = pytest.importorskip("safetensors.numpy", reason="pip install safetensors to run the compatibility tests")

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_]


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {f"t_{np.dtype(d).name}": (rng.standard_normal((3, 4)) * 100).astype(d) for d in DTYPES}
    out["scalar"] = np.array(3.5, np.float32)
    out["empty"] = np.zeros((0, 5), np.float32)
    out["nested.layer.weight"] = rng.standard_normal((7,)).astype(np.float32)
    return out


def test_files_written_by_safetensors_load_in_kiln(tmp_path):
    arrays = _arrays()
    st_numpy.save_file(arrays, str(tmp_path / "ref.safetensors"), metadata={"source": "safetensors"})
    loaded = kiln.load(tmp_path / "ref.safetensors")
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].numpy().dtype == array.dtype
        assert loaded[name].numpy().tobytes() == array.tobytes()
    assert kiln.io.load_metadata(tmp_path / "ref.safetensors") == {"source": "safetensors"}


def test_files_written_by_kiln_load_in_safetensors(tmp_path):
    arrays = _arrays()
    kiln.save({k: kiln.from_numpy(v) for k, v in arrays.items()}, tmp_path / "kiln.safetensors",
              metadata={"source": "kiln"})
    loaded = st_numpy.load_file(str(tmp_path / "kiln.safetensors"))
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        assert loaded[name].tobytes() == array.tobytes()
    from safetensors import safe_open

    with safe_open(str(tmp_path / "kiln.safetensors"), framework="numpy") as f:
        assert f.metadata() == {"source": "kiln"}


# ---- PyTorch state dicts into kiln models -----------------------------------------------
def _torch_mlp(torch):
    nn = torch.nn
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def _torch_lenet_5(torch):
    nn = torch.nn
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 6, 5)), ("act1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(6, 16, 5)), ("act2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(400, 120)), ("act3", nn.ReLU()),
        ("fc2", nn.Linear(120, 84)), ("act4", nn.ReLU()),
        ("fc3", nn.Linear(84, 10)),
    ]))


@pytest.mark.parametrize("name, input_shape", [("mlp", (8, 784)), ("lenet_5", (4, 1, 32, 32))])
def test_pytorch_state_dict_loads_into_kiln_model(tmp_path, name, input_shape):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    reference = (_torch_mlp if name == "mlp" else _torch_lenet_5)(torch).eval()
    path = tmp_path / f"{name}.safetensors"
    st_torch.save_file(reference.state_dict(), str(path))

    model = getattr(kiln.models, name)().eval()
    model.load_state_dict(kiln.load(path))  # strict: the key names match exactly

    x = np.random.default_rng(1).standard_normal(input_shape).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x)).numpy()
    with kiln.no_grad():
        got = model(kiln.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_kiln_weights_load_into_pytorch_model(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    model = kiln.models.lenet_5().eval()
    kiln.save(model.state_dict(), tmp_path / "lenet.safetensors")
    reference = _torch_lenet_5(torch).eval()
    reference.load_state_dict(st_torch.load_file(str(tmp_path / "lenet.safetensors")))
    x = np.random.default_rng(2).standard_normal((2, 1, 32, 32)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x)).numpy()
    with kiln.no_grad():
        got = model(kiln.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
