"""Whole-module checkpoints as PyTorch scripts write them: kiln.save(model, f) pickles the module,
kiln.load refuses a pickle unless weights_only=False or its globals are allowed
(kiln.serialization.safe_globals), and NumPy arrays come back as NumPy arrays."""
from __future__ import annotations

import base64
import io
import json
import pickle
import struct
import sys
import types

import numpy as np
import pytest

import kiln
import kiln.serialization
from kiln import nn
from kiln.io import CheckpointError, PickledCheckpointError
from kiln.io.pickled import PICKLE_KEY


class TinyNet(nn.Module):
    """A custom module as scripts define them: submodules, a buffer, tied weights, plain attributes."""

    def __init__(self, vocab: int = 7, dim: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([nn.Linear(dim, dim) for _ in range(2)])
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # weight tying
        self.register_buffer("scale", kiln.tensor([0.5]))
        self.config = {"vocab": vocab, "dim": dim, "name": "tiny"}
        self.device = kiln.device("cpu")
        self.drop = nn.Dropout(0.5)

    def forward(self, idx: kiln.Tensor) -> kiln.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = self.drop(kiln.tanh(block(x))) * self.scale
        return self.head(x)


class Marker:
    """Pickles as a call to `mark`: unpickling it runs code, which a weights_only load must never do."""

    calls: list[str] = []

    def __reduce__(self):
        return mark, ("unpickled",)


def mark(what: str) -> str:
    Marker.calls.append(what)
    return what


@pytest.fixture(autouse=True)
def _no_safe_globals_left_over():
    kiln.serialization.clear_safe_globals()
    Marker.calls.clear()
    yield
    kiln.serialization.clear_safe_globals()


def _sequential() -> nn.Sequential:
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 2))
    model[0].bias.requires_grad_(False)  # a frozen parameter
    return model


_SEQUENTIAL_GLOBALS = [nn.Sequential, nn.Linear, nn.ReLU, nn.Dropout]


def _np(t: kiln.Tensor) -> np.ndarray:
    return t.detach().numpy()


def _name(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _save(obj, **kw) -> io.BytesIO:
    buffer = io.BytesIO()
    kiln.save(obj, buffer, **kw)
    buffer.seek(0)
    return buffer


# ---- round trips ----------------------------------------------------------------------------
@pytest.mark.parametrize("training", [True, False])
def test_a_sequential_round_trips_with_weights_only_false(training):
    model = _sequential().train(training)
    loaded = kiln.load(_save(model), weights_only=False)
    assert type(loaded) is nn.Sequential and loaded.training is training and loaded[2].training is training
    assert [type(m) for m in loaded] == [type(m) for m in model]
    for (name, p), (name2, q) in zip(model.named_parameters(), loaded.named_parameters()):
        assert name == name2 and type(q) is nn.Parameter and q.requires_grad == p.requires_grad
        assert q.dtype == p.dtype and _np(q).tobytes() == _np(p).tobytes()
        assert not np.shares_memory(_np(q), _np(p))  # fresh tensors, not the saved ones
    x = kiln.randn(5, 3)
    model.eval(), loaded.eval()
    np.testing.assert_array_equal(_np(loaded(x)), _np(model(x)))


def test_a_custom_module_round_trips_with_ties_buffers_and_attributes():
    model = TinyNet()
    loaded = kiln.load(_save(model), weights_only=False)
    assert type(loaded) is TinyNet and loaded.config == model.config and loaded.device == kiln.device("cpu")
    assert loaded.head.weight is loaded.embed.weight  # still tied: stored once, one Parameter
    assert sorted(loaded.state_dict()) == sorted(model.state_dict())
    assert type(loaded.scale) is kiln.Tensor and loaded.scale.tolist() == [0.5]
    idx = kiln.tensor([[1, 2, 3], [4, 5, 6]])
    model.eval(), loaded.eval()
    np.testing.assert_array_equal(_np(loaded(idx)), _np(model(idx)))
    loss = loaded(idx).sum()  # the loaded module trains: gradients reach the tied weight
    loss.backward()
    assert loaded.embed.weight.grad is not None and loaded.blocks[1].weight.grad is not None


def test_the_file_is_safetensors_with_the_module_tensor_names():
    raw = _save(TinyNet()).getvalue()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    stored = {k for k in header if k != "__metadata__"}
    assert stored == {"embed.weight", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                      "scale"}  # the tied head.weight is stored once, under its first name
    assert set(header["__metadata__"]) == {PICKLE_KEY}
    assert kiln.io.load_metadata(io.BytesIO(raw)) == {}


def test_a_script_saves_the_model_then_loads_and_evaluates_it(tmp_path):
    path = tmp_path / "model.pt"
    model = TinyNet()
    kiln.save(model, path)
    x = kiln.tensor([[0, 1, 2]])
    with kiln.no_grad():
        expected = _np(model.eval()(x))
    for location in ("cpu", kiln.device("cpu"), None):
        model = kiln.load(path, map_location=location, weights_only=False)
        model.eval()
        with kiln.no_grad():
            np.testing.assert_array_equal(_np(model(x)), expected)


def test_a_loaded_module_compiles():
    loaded = kiln.load(_save(_sequential()), weights_only=False).eval()
    x = kiln.randn(4, 3)
    np.testing.assert_allclose(_np(kiln.compile(loaded, backend="interpret")(x)), _np(loaded(x)), rtol=1e-6)


def test_a_pickled_optimizer_resumes_training_bit_for_bit():
    def run(save_at: int) -> list[float]:
        kiln.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        opt = kiln.optim.Adam(model.parameters(), lr=0.05)
        kiln.manual_seed(1)
        batches = [(kiln.randn(5, 4), kiln.randn(5, 2)) for _ in range(6)]
        losses = []
        for i, (x, y) in enumerate(batches):
            if i == save_at:  # the whole run, pickled: model and optimizer share their parameters
                ckpt = kiln.load(_save({"model": model, "opt": opt, "step": i}), weights_only=False)
                model, opt = ckpt["model"], ckpt["opt"]
                assert all(p is q for p, q in zip(opt.param_groups[0]["params"], model.parameters()))
                assert ckpt["step"] == i and len(opt.state) == 4
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    assert run(save_at=3) == run(save_at=-1)


def test_pickle_protocol_is_honoured():
    for protocol in (2, 5):
        buffer = _save(_sequential(), pickle_protocol=protocol)
        _, metadata = kiln.io.read_arrays(buffer)
        data = base64.b64decode(json.loads(metadata[PICKLE_KEY])["pickle"])
        assert data[:2] == bytes([0x80, protocol])
        buffer.seek(0)
        assert type(kiln.load(buffer, weights_only=False)) is nn.Sequential
        buffer.seek(0)
        with pytest.raises(PickledCheckpointError, match=f"needs {', '.join(map(_name, _SEQUENTIAL_GLOBALS))}, "):
            kiln.load(buffer)  # GLOBAL (protocol 2) and STACK_GLOBAL (4 and up) name the same classes
    for bad in (0, 1, 99, "4"):
        with pytest.raises(ValueError, match=r"pickle_protocol must be an int from 2 to \d, got"):
            kiln.save(_sequential(), io.BytesIO(), pickle_protocol=bad)


def test_a_global_named_by_a_copyreg_extension_code_is_refused(monkeypatch):
    monkeypatch.setattr("copyreg._inverted_registry", {240: ("os", "getcwd")})
    monkeypatch.setattr("copyreg._extension_registry", {("os", "getcwd"): 240})
    arrays, metadata = kiln.io.read_arrays(_save({"x": {1}}))
    doc = json.loads(metadata[PICKLE_KEY])
    doc["pickle"] = base64.b64encode(b"\x80\x02\x82\xf0)R.").decode()  # call os.getcwd(), by extension code
    buffer = io.BytesIO()
    kiln.io.write_arrays(arrays, buffer, {PICKLE_KEY: json.dumps(doc)})
    buffer.seek(0)
    with pytest.raises(PickledCheckpointError, match=r"needs os\.getcwd, which"):
        kiln.load(buffer)


# ---- weights_only=True refuses a pickle ---------------------------------------------------
def test_default_load_refuses_a_pickled_module_with_the_fix(tmp_path):
    kiln.save(TinyNet(), tmp_path / "model.pt")
    with pytest.raises(PickledCheckpointError) as info:
        kiln.load(tmp_path / "model.pt")
    message = str(info.value)
    assert isinstance(info.value, pickle.UnpicklingError) and isinstance(info.value, CheckpointError)
    assert f"holds a pickled {_name(TinyNet)}" in message and "unpickling runs code" in message
    assert "kiln.load(f, weights_only=False)" in message
    needed = [TinyNet, nn.Embedding, nn.ModuleList, nn.Linear, nn.Dropout]  # dicts, tensors, devices need none
    assert f"needs {', '.join(map(_name, needed))}, which" in message
    assert "add_safe_globals([TinyNet, Embedding, ModuleList, Linear, Dropout])" in message
    with pytest.raises(PickledCheckpointError):
        kiln.load(tmp_path / "model.pt", weights_only=None)  # None means the default, as in PyTorch


def test_a_refused_pickle_runs_no_code_and_weights_only_false_does():
    buffer = _save({"payload": Marker()})
    with pytest.raises(PickledCheckpointError, match=rf"needs {_name(mark)}, which"):
        kiln.load(buffer)
    assert Marker.calls == []
    buffer.seek(0)
    assert kiln.load(buffer, weights_only=False) == {"payload": "unpickled"}
    assert Marker.calls == ["unpickled"]


def test_a_refused_file_is_refused_from_its_header_alone(tmp_path):
    path = tmp_path / "model.pt"
    kiln.save(TinyNet(), path)
    path.write_bytes(path.read_bytes()[:-16])  # tensor data cut short: only a full read would notice
    with pytest.raises(PickledCheckpointError):
        kiln.load(path)
    with pytest.raises(kiln.io.SafetensorsError, match="do not fit"):
        kiln.load(path, weights_only=False)


def test_state_dicts_and_checkpoints_still_load_by_default():
    model = TinyNet()
    ckpt = {"model": model.state_dict(), "step": 3, "cfg": {"lr": 0.1}}
    loaded = kiln.load(_save(ckpt))
    assert loaded["step"] == 3 and sorted(loaded["model"]) == sorted(model.state_dict())
    _, metadata = kiln.io.read_arrays(_save(ckpt))
    assert PICKLE_KEY not in metadata  # stored as a checkpoint tree, not pickled


@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_weights_only_must_be_a_bool_or_none(value):
    with pytest.raises(TypeError, match=r"weights_only must be True, False or None, got"):
        kiln.load(_save({"a": 1}), weights_only=value)


# ---- kiln.serialization: safe globals ------------------------------------------------------


def test_safe_globals_allows_exactly_inside_the_block():
    buffer = _save(_sequential())
    with kiln.serialization.safe_globals(_SEQUENTIAL_GLOBALS):
        assert kiln.serialization.get_safe_globals() == _SEQUENTIAL_GLOBALS
        loaded = kiln.load(buffer)
    assert type(loaded) is nn.Sequential and kiln.serialization.get_safe_globals() == []
    buffer.seek(0)
    with pytest.raises(PickledCheckpointError):
        kiln.load(buffer)


def test_add_get_and_clear_safe_globals():
    buffer = _save(_sequential())
    kiln.serialization.add_safe_globals([nn.Sequential, nn.Linear])
    with pytest.raises(PickledCheckpointError) as info:
        kiln.load(buffer)
    refused = str(info.value).split(" needs ")[1].split(", which")[0]
    assert "ReLU" in refused and "Dropout" in refused and "Sequential" not in refused and "Linear" not in refused
    assert "add_safe_globals([ReLU, Dropout])" in str(info.value)
    kiln.serialization.add_safe_globals([nn.ReLU, nn.Dropout])
    assert kiln.serialization.get_safe_globals() == _SEQUENTIAL_GLOBALS
    buffer.seek(0)
    assert type(kiln.load(buffer)) is nn.Sequential
    kiln.serialization.clear_safe_globals()
    assert kiln.serialization.get_safe_globals() == []


def test_a_custom_module_loads_once_its_classes_are_allowed():
    buffer = _save(TinyNet())
    with kiln.serialization.safe_globals([TinyNet, nn.Embedding, nn.ModuleList, nn.Linear, nn.Dropout]):
        loaded = kiln.load(buffer)
    assert type(loaded) is TinyNet and loaded.head.weight is loaded.embed.weight


def test_a_global_saved_under_another_name_is_allowed_by_a_pair(monkeypatch):
    old = types.ModuleType("old_models")
    old.Net = type("Net", (nn.Linear,), {"__module__": "old_models"})
    monkeypatch.setitem(sys.modules, "old_models", old)
    buffer = _save(old.Net(2, 3))
    monkeypatch.delitem(sys.modules, "old_models")  # the class moved: the file's name no longer imports

    class Net(nn.Linear):
        pass

    with kiln.serialization.safe_globals([(Net, "old_models.Net")]):
        loaded = kiln.load(buffer)
    assert type(loaded) is Net and loaded.weight.shape == (3, 2)


def test_weights_only_false_names_a_class_the_program_lacks(monkeypatch):
    gone = types.ModuleType("gone_models")
    gone.Net = type("Net", (nn.Linear,), {"__module__": "gone_models"})
    monkeypatch.setitem(sys.modules, "gone_models", gone)
    buffer = _save(gone.Net(2, 2))
    monkeypatch.delitem(sys.modules, "gone_models")
    with pytest.raises(ModuleNotFoundError, match=r"needs gone_models\.Net.*define or import Net"):
        kiln.load(buffer, weights_only=False)


@pytest.mark.parametrize("bad, match", [
    ("Net", "expects a list of classes or functions, got str"),
    (["TinyNet"], "pass the class or function itself"),
    ([3], r"3 \(int\) is not a class or function"),
    ([(TinyNet, 3)], "needs a str name second"),
])
def test_add_safe_globals_rejects_what_is_not_a_class_or_function(bad, match):
    with pytest.raises(TypeError, match=match):
        kiln.serialization.add_safe_globals(bad)
    with pytest.raises(TypeError, match=match.replace("add_safe_globals", "safe_globals")):
        kiln.serialization.safe_globals(bad)


# ---- NumPy arrays stay NumPy arrays ----------------------------------------------------------
def test_a_saved_numpy_array_loads_as_a_numpy_array():
    for array in (np.arange(3), np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3), np.array(True),
                  np.arange(4, dtype=np.float16)):
        loaded = kiln.load(_save(array))
        assert type(loaded) is np.ndarray and loaded.dtype == array.dtype and loaded.shape == array.shape
        np.testing.assert_array_equal(loaded, array)


def test_structures_keep_arrays_as_arrays_and_tensors_as_tensors():
    base = np.arange(6.0)
    t = kiln.ones(2)
    obj = {"a": base, "view": base[1:4], "t": t, "same_t": t, "list": [np.zeros(2, np.int32), kiln.zeros(1)]}
    loaded = kiln.load(_save(obj))
    assert type(loaded["a"]) is np.ndarray and type(loaded["view"]) is np.ndarray
    assert np.shares_memory(loaded["a"], loaded["view"])  # a view of a saved array is still a view
    assert type(loaded["t"]) is kiln.Tensor and loaded["t"] is loaded["same_t"]
    assert [type(x) for x in loaded["list"]] == [np.ndarray, kiln.Tensor]
    assert loaded["list"][0].dtype == np.int32


def test_arrays_inside_a_pickled_object_stay_arrays():
    model = nn.Linear(2, 2)
    model.stats = {"mean": np.array([0.5, 1.5])}
    loaded = kiln.load(_save(model), weights_only=False)
    assert type(loaded.stats["mean"]) is np.ndarray and loaded.stats["mean"].tolist() == [0.5, 1.5]


# A file kiln.save wrote before arrays were told apart from tensors: {"a": np.arange(3), "t": kiln.ones(2),
# "n": 1}, checkpoint format version 1, where a NumPy array was stored as a "tensor" node.
_OLD_FILE = (
    b'\x00\x01\x00\x00\x00\x00\x00\x00{"__metadata__":{"kiln.checkpoint":"{\\"version\\":1,\\"tree\\":{\\"dict\\":'
    b'[[\\"a\\",{\\"tensor\\":\\"a\\"}],[\\"t\\",{\\"tensor\\":\\"t\\"}],[\\"n\\",1]]}}"},"a":{"dtype":"I64","shape":'
    b'[3],"data_offsets":[0,24]},"t":{"dtype":"F32","shape":[2],"data_offsets":[24,32]}}       \x00\x00\x00\x00'
    b'\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80?\x00\x00\x80?'
)


def test_a_file_written_before_arrays_were_recorded_still_loads():
    loaded = kiln.load(io.BytesIO(_OLD_FILE))
    assert type(loaded["a"]) is kiln.Tensor and loaded["a"].tolist() == [0, 1, 2]  # as it loaded then
    assert type(loaded["t"]) is kiln.Tensor and loaded["t"].tolist() == [1.0, 1.0] and loaded["n"] == 1


def test_array_nodes_raise_the_format_version():
    _, with_array = kiln.io.read_arrays(_save({"a": np.zeros(1)}))
    _, without = kiln.io.read_arrays(_save({"t": kiln.zeros(1), "n": 1}))
    assert json.loads(with_array["kiln.checkpoint"])["version"] == 2
    assert json.loads(without["kiln.checkpoint"])["version"] == 1  # still readable by an older kiln
    text = '{"version": 1, "tree": {"ndarray": "w"}}'  # a version-1 file cannot hold the new node
    buffer = io.BytesIO()
    kiln.io.write_arrays({"w": np.ones(1, np.float32)}, buffer, {"kiln.checkpoint": text})
    buffer.seek(0)
    with pytest.raises(CheckpointError, match="unknown checkpoint node"):
        kiln.load(buffer)


# ---- corrupt pickled files ------------------------------------------------------------------
def _tampered(change) -> io.BytesIO:
    arrays, metadata = kiln.io.read_arrays(_save(nn.Linear(2, 2)))
    doc = json.loads(metadata[PICKLE_KEY])
    change(doc)
    buffer = io.BytesIO()
    kiln.io.write_arrays(arrays, buffer, {PICKLE_KEY: json.dumps(doc)})
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("change, match", [
    (lambda d: d.update(pickle="not base64!"), "not valid base64"),
    (lambda d: d.update(version=9), "format version 9"),
    (lambda d: d.pop("leaves"), "not an object with the fields"),
    (lambda d: d["leaves"].pop(), "tensor table does not match"),
    (lambda d: d["leaves"][0].update({"class": "module"}), "tensor table does not match"),
    (lambda d: d["leaves"][0].update({"class": "ndarray"}), "recorded as a ndarray but stored as a Tensor"),
    (lambda d: d.update(pickle=d["pickle"][:40]), "is corrupt"),
])
def test_a_tampered_pickled_file_raises_checkpoint_error(change, match):
    with pytest.raises(CheckpointError, match=match):
        kiln.load(_tampered(change), weights_only=False)


# ---- PyTorch's contract, side by side ----------------------------------------------------------
def test_the_same_contract_as_torch_save_and_load():
    torch = pytest.importorskip("torch")
    for lib, net in ((torch, torch.nn.Sequential(torch.nn.Linear(2, 2))), (kiln, nn.Sequential(nn.Linear(2, 2)))):
        buffer = io.BytesIO()
        lib.save(net, buffer)
        buffer.seek(0)
        with pytest.raises(pickle.UnpicklingError):
            lib.load(buffer)
        buffer.seek(0)
        assert type(lib.load(buffer, weights_only=False)) is type(net)
        buffer.seek(0)
        with lib.serialization.safe_globals([type(net), type(net[0])]):
            assert type(lib.load(buffer)) is type(net)
        buffer = io.BytesIO()
        lib.save(np.arange(3), buffer)
        buffer.seek(0)
        assert type(lib.load(buffer, weights_only=False)) is np.ndarray


def test_an_unpickled_optimizer_owns_its_parameter_groups():
    import pickle

    model = kiln.nn.Linear(2, 1)
    opt = kiln.optim.Adam(model.parameters(), lr=0.1)
    opt.param_groups[0]["lr"]  # groups are ParamGroups that know their optimizer
    restored = pickle.loads(pickle.dumps(opt))
    assert all(group.optimizer is restored for group in restored.param_groups)
