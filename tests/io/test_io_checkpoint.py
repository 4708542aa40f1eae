"""Training checkpoints: nested structures round trip through kiln.save/kiln.load (no pickle),
to paths and file objects, and training resumed from one equals uninterrupted training."""
from __future__ import annotations

import io
import json
import math
import struct
from collections import Counter, OrderedDict

import numpy as np
import pytest

import kiln
from kiln.io import CheckpointError, SafetensorsError
from kiln.io.checkpoint import CHECKPOINT_KEY


def _nested() -> dict:
    w = kiln.arange(6, dtype=kiln.float32).reshape(2, 3)
    return {
        "model": {"w": w, "b": kiln.zeros(3, dtype=kiln.float64)},
        "iter": 100,
        "big": 2**70,
        "loss": 0.125,
        "neg_zero": -0.0,
        "specials": [math.nan, math.inf, -math.inf],
        "flags": (True, False, None),
        "name": "char-gpt ✓",
        "config": {"lr": 3e-4, "betas": (0.9, 0.95), "layers": [1, 2, [3, (4,)]], "empty": {}, "none": None},
        1: "int key", 2.5: "float key", None: "none key", True: "bool key",
        "ints": kiln.tensor([1, 2, 3]),
        "mask": kiln.tensor([True, False]),
        "array": np.arange(4, dtype=np.int32),
        "np_scalars": [np.float32(1.5), np.int64(7), np.bool_(True)],
    }


def _assert_same(a, b, path="ckpt"):
    """Structure, Python types and values equal (tensors compared by dtype, shape and bytes)."""
    if isinstance(a, (kiln.Tensor, np.ndarray)):
        assert type(b) is (kiln.Tensor if isinstance(a, kiln.Tensor) else np.ndarray), path  # arrays stay arrays
        expected, got = (a.numpy(), b.numpy()) if isinstance(a, kiln.Tensor) else (a, b)
        assert got.dtype == expected.dtype and got.shape == expected.shape, path
        assert got.tobytes() == expected.tobytes(), path
        return
    if isinstance(a, np.generic):
        a = a.item()
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b and repr(a) == repr(b), path  # repr: -0.0 stays -0.0


def test_nested_checkpoint_round_trips_to_a_path(tmp_path):
    ckpt = _nested()
    kiln.save(ckpt, tmp_path / "ckpt.safetensors")
    _assert_same(ckpt, kiln.load(tmp_path / "ckpt.safetensors"))


def test_nested_checkpoint_round_trips_through_file_objects(tmp_path):
    ckpt = _nested()
    buffer = io.BytesIO()
    kiln.save(ckpt, buffer)
    buffer.seek(0)
    _assert_same(ckpt, kiln.load(buffer))
    with open(tmp_path / "f.safetensors", "wb") as f:
        kiln.save(ckpt, f)
    with open(tmp_path / "f.safetensors", "rb") as f:
        _assert_same(ckpt, kiln.load(f))
    assert (tmp_path / "f.safetensors").read_bytes() == buffer.getvalue()


class _WriteOnly:
    """A stream with write() only (a pipe or socket): no seek, tell or read."""

    def __init__(self):
        self.chunks: list[bytes] = []

    def write(self, data) -> int:
        self.chunks.append(bytes(data))
        return len(data)


class _Trickle:
    """A stream with read() only that returns at most 3 bytes per call, as a slow pipe may."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        n = min(n if n >= 0 else len(self.data), 3)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += len(chunk)
        return chunk


def test_unseekable_streams_write_and_read():
    ckpt = _nested()
    sink = _WriteOnly()
    kiln.save(ckpt, sink)
    _assert_same(ckpt, kiln.load(_Trickle(b"".join(sink.chunks))))


def test_checkpoints_follow_one_another_in_one_stream():
    stream = io.BytesIO()
    kiln.save({"epoch": 1, "w": kiln.ones(2)}, stream)
    kiln.save({"x": kiln.zeros(3)}, stream)  # a flat state dict: a plain safetensors file
    kiln.save([kiln.full((1,), 2.0), "end"], stream)
    stream.seek(0)
    first, second, third = kiln.load(stream), kiln.load(stream), kiln.load(stream)
    assert first["epoch"] == 1 and first["w"].tolist() == [1.0, 1.0]
    assert list(second) == ["x"] and second["x"].tolist() == [0.0, 0.0, 0.0]
    assert third[0].tolist() == [2.0] and third[1] == "end"
    assert stream.read() == b""


def test_a_tensor_saved_twice_is_stored_once_and_loads_as_one_tensor(tmp_path):
    model = kiln.nn.Linear(3, 3)
    shared = model.weight.detach()
    ckpt = {"encoder": {"embed": shared}, "decoder": {"proj": model.weight.detach()}, "alias": [shared]}
    kiln.save(ckpt, tmp_path / "tied.safetensors")
    raw = (tmp_path / "tied.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert sorted(k for k in header if k != "__metadata__") == ["encoder.embed"]  # one copy of the bytes
    loaded = kiln.load(tmp_path / "tied.safetensors")
    assert loaded["encoder"]["embed"] is loaded["decoder"]["proj"] is loaded["alias"][0]
    np.testing.assert_array_equal(loaded["alias"][0].numpy(), model.weight.detach().numpy())


def test_ordered_dicts_and_counters_keep_their_type(tmp_path):
    ckpt = {"sd": OrderedDict([("b", kiln.ones(1)), ("a", kiln.zeros(1))]), "milestones": Counter([30, 80, 80])}
    kiln.save(ckpt, tmp_path / "c.safetensors")
    loaded = kiln.load(tmp_path / "c.safetensors")
    assert type(loaded["sd"]) is OrderedDict and list(loaded["sd"]) == ["b", "a"]
    assert loaded["milestones"] == Counter({30: 1, 80: 2}) and type(loaded["milestones"]) is Counter


@pytest.mark.parametrize("obj", [kiln.ones(2, 2), [kiln.ones(1), 3], ("a", 1.5), 42, None, "text", {}, []])
def test_any_supported_top_level_object_round_trips(tmp_path, obj):
    kiln.save(obj, tmp_path / "o.safetensors")
    _assert_same(obj, kiln.load(tmp_path / "o.safetensors"))


def test_a_flat_state_dict_is_still_a_plain_safetensors_file(tmp_path):
    state = kiln.nn.Linear(2, 3).state_dict()
    kiln.save(state, tmp_path / "sd.safetensors")
    raw = (tmp_path / "sd.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert sorted(json.loads(raw[8:8 + n])) == ["bias", "weight"]  # no structure metadata
    loaded = kiln.load(tmp_path / "sd.safetensors")
    assert sorted(loaded) == ["bias", "weight"]


def test_files_written_before_checkpoints_still_load(tmp_path):
    arrays = {"layer.weight": np.ones((2, 2), np.float32), "layer.bias": np.zeros(2, np.float32)}
    kiln.io.write_arrays(arrays, tmp_path / "old.safetensors", {"epoch": "3"})
    loaded = kiln.load(tmp_path / "old.safetensors")
    assert list(loaded) == ["layer.bias", "layer.weight"]
    assert kiln.io.load_metadata(tmp_path / "old.safetensors") == {"epoch": "3"}


def test_checkpoints_open_in_the_safetensors_library(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    ckpt = {"model": {"fc.weight": kiln.ones(2, 2)}, "optimizer": {"state": {0: {"exp_avg": kiln.zeros(2)}}},
            "step": 5}
    kiln.save(ckpt, tmp_path / "ckpt.safetensors", metadata={"run": "a"})
    arrays = st_numpy.load_file(str(tmp_path / "ckpt.safetensors"))
    assert sorted(arrays) == ["model.fc.weight", "optimizer.state.0.exp_avg"]
    assert kiln.io.load_metadata(tmp_path / "ckpt.safetensors") == {"run": "a"}


def test_names_that_collide_get_a_suffix(tmp_path):
    ckpt = {"a.b": kiln.ones(1), "a": {"b": kiln.zeros(1)}}
    kiln.save(ckpt, tmp_path / "n.safetensors")
    loaded = kiln.load(tmp_path / "n.safetensors")
    assert loaded["a.b"].tolist() == [1.0] and loaded["a"]["b"].tolist() == [0.0]


def test_load_moves_tensors_to_the_device_asked(tmp_path):
    kiln.save({"w": kiln.ones(1), "n": 1}, tmp_path / "d.safetensors")
    assert kiln.load(tmp_path / "d.safetensors", map_location="cpu")["w"].device == kiln.device("cpu")
    assert kiln.load(tmp_path / "d.safetensors", weights_only=True)["n"] == 1
    with pytest.raises(TypeError, match="device or map_location, not both"):
        kiln.load(tmp_path / "d.safetensors", "cpu", map_location="cpu")
    with pytest.raises(TypeError, match="map_location must be a device"):
        kiln.load(tmp_path / "d.safetensors", map_location=lambda storage, loc: storage)


# ---- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: kiln.nn.Linear(2, 2), lambda: kiln.models.mlp(4, (3,), 2)])
def test_saving_a_module_pickles_it_and_loading_it_needs_weights_only_false(tmp_path, make):
    model = make()
    for obj in (model, {"model": model, "iter": 1}):
        kiln.save(obj, tmp_path / "m.pt")
        with pytest.raises(kiln.io.PickledCheckpointError, match=r"pickled .*weights_only=False"):
            kiln.load(tmp_path / "m.pt")
    assert kiln.load(tmp_path / "m.pt", weights_only=False)["iter"] == 1


def test_saving_a_compiled_module_points_to_its_module_and_state_dict(tmp_path):
    model = kiln.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"is a module \(JITModule\).*pickling failed.*compiled\.module.*"
                                        r"model\.state_dict\(\)"):
        kiln.save(kiln.compile(model), tmp_path / "m.pt")
    assert not (tmp_path / "m.pt").exists()


@pytest.mark.parametrize("obj", [{"s": {1, 2}}, {"b": b"raw"}, {(1, 2): 3}, {"nested": [1, frozenset({2})]}])
def test_plain_data_the_tree_cannot_hold_is_pickled_and_loads_without_globals(tmp_path, obj):
    kiln.save(obj, tmp_path / "x.pt")
    assert kiln.load(tmp_path / "x.pt") == obj  # its pickle names no global, so weights_only=True loads it


def test_a_function_in_a_checkpoint_needs_allowing(tmp_path):
    kiln.save({"fn": len}, tmp_path / "x.pt")
    with pytest.raises(kiln.io.PickledCheckpointError, match=r"needs builtins\.len.*add_safe_globals\(\[len\]\)"):
        kiln.load(tmp_path / "x.pt")
    assert kiln.load(tmp_path / "x.pt", weights_only=False) == {"fn": len}


def test_what_pickle_cannot_store_names_its_path(tmp_path):
    with pytest.raises(TypeError, match=r"checkpoint\['fn'\] is a function.*pickling failed.*lambda"):
        kiln.save({"fn": lambda x: x}, tmp_path / "x.pt")


def test_a_structure_that_contains_itself_is_pickled(tmp_path):
    loop: list = [1]
    loop.append(loop)
    kiln.save({"loop": loop}, tmp_path / "x.pt")
    loaded = kiln.load(tmp_path / "x.pt")["loop"]
    assert loaded[0] == 1 and loaded[1] is loaded


def test_text_mode_files_are_refused_with_the_fix(tmp_path):
    with open(tmp_path / "t.txt", "w") as f, pytest.raises(TypeError, match=r"text mode.*open\(path, 'wb'\)"):
        kiln.save({"a": 1}, f)
    (tmp_path / "t.txt").write_bytes(b"")
    with open(tmp_path / "t.txt") as f, pytest.raises(TypeError, match=r"text mode.*open\(path, 'rb'\)"):
        kiln.load(f)
    with pytest.raises(TypeError, match="f must be a path"):
        kiln.save({"a": 1}, 3)


def test_reserved_metadata_key_is_refused(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        kiln.save({"a": 1}, tmp_path / "x.safetensors", metadata={CHECKPOINT_KEY: "{}"})


def _with_structure(tmp_path, text: str):
    path = tmp_path / "bad.safetensors"
    kiln.io.write_arrays({"w": np.ones(1, np.float32)}, path, {CHECKPOINT_KEY: text})
    return path


@pytest.mark.parametrize("text, match", [
    ("{not json", "is not valid JSON"),
    ('{"version": 99, "tree": null}', "format version 99"),
    ("[1]", "expected an object with 'version' and 'tree'"),
    ('{"version": 1, "tree": {"tensor": "missing"}}', "refers to tensor 'missing'"),
    ('{"version": 1, "tree": {"pickle": "x"}}', "unknown checkpoint node"),
    ('{"version": 1, "tree": {"float": "1e3"}}', "expected 'nan', 'inf' or '-inf'"),
    ('{"version": 1, "tree": {"dict": [[[1], 2]]}}', r"dict key \[1\]"),
    ('{"version": 1, "tree": {"list": 5}}', "expected a JSON array"),
    ('{"version": 1, "tree": ' + '{"list": [' * 5000 + "]}" * 5000 + "}", "nests too deeply"),
], ids=["json", "version", "not_object", "missing_tensor", "unknown_node", "bad_float", "bad_key", "bad_list",
        "deep"])
def test_a_corrupt_structure_raises_checkpoint_error(tmp_path, text, match):
    path = _with_structure(tmp_path, text)
    with pytest.raises(CheckpointError, match=match) as info:
        kiln.load(path)
    assert isinstance(info.value, ValueError) and "bad.safetensors" in str(info.value)


def test_a_truncated_stream_raises_safetensors_error():
    buffer = io.BytesIO()
    kiln.save({"w": kiln.ones(100), "step": 1}, buffer)
    with pytest.raises(SafetensorsError, match="truncated"):
        kiln.load(_Trickle(buffer.getvalue()[:-10]))  # unseekable: the end shows only while reading
    with pytest.raises(SafetensorsError, match=r"data_offsets \[0, 400\], which do not fit"):
        kiln.load(io.BytesIO(buffer.getvalue()[:-10]))  # seekable: its size bounds the offsets
    with pytest.raises(SafetensorsError, match="fewer than the 8-byte header"):
        kiln.load(io.BytesIO(b"abc"))


# ---- optimizer state and resumed training ---------------------------------------------------
def _batches(n: int):
    rng = np.random.default_rng(0)
    return [(kiln.from_numpy(rng.standard_normal((8, 6)).astype(np.float32)),
             kiln.from_numpy(rng.integers(0, 3, 8))) for _ in range(n)]


def _model() -> kiln.nn.Module:
    kiln.manual_seed(0)
    return kiln.nn.Sequential(kiln.nn.Linear(6, 16), kiln.nn.ReLU(), kiln.nn.Dropout(0.2), kiln.nn.Linear(16, 3))


def _train(model, opt, sched, step_fn, batches) -> list[float]:
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = kiln.nn.functional.cross_entropy(step_fn(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def _setup(compiled: bool):
    model = _model()
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, amsgrad=True)
    sched = kiln.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return model, opt, sched, (kiln.compile(model) if compiled else model)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_resumed_training_equals_uninterrupted_training(tmp_path, compiled):
    batches = _batches(10)
    model, opt, sched, step = _setup(compiled)
    kiln.manual_seed(1)
    uninterrupted = _train(model, opt, sched, step, batches)
    final = {k: v.numpy().copy() for k, v in model.state_dict().items()}

    model, opt, sched, step = _setup(compiled)
    kiln.manual_seed(1)
    first = _train(model, opt, sched, step, batches[:4])
    kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
               "rng": kiln.get_rng_state(), "iter": 4, "config": {"lr": 1e-2, "arch": [6, 16, 3]}},
              tmp_path / "ckpt.safetensors")
    del model, opt, sched, step

    model, opt, sched, step = _setup(compiled)  # a fresh process would build these the same way
    kiln.manual_seed(123)  # whatever state the new run starts in, the checkpoint restores it
    ckpt = kiln.load(tmp_path / "ckpt.safetensors")
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    kiln.set_rng_state(ckpt["rng"])
    assert isinstance(ckpt["rng"], tuple) and isinstance(opt.param_groups[0]["betas"], tuple)
    rest = _train(model, opt, sched, step, batches[ckpt["iter"]:])

    assert first + rest == uninterrupted  # bit for bit: same state, same numbers
    if compiled:
        assert step.stats.fallbacks == 0 and step.stats.hits > 0  # the resumed steps really ran compiled
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), final[name], err_msg=name)


def test_compiled_and_eager_resumed_runs_agree(tmp_path):
    batches = _batches(6)
    runs = []
    for compiled in (False, True):
        model, opt, sched, step = _setup(compiled)
        kiln.manual_seed(1)
        _train(model, opt, sched, step, batches[:3])
        kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": kiln.get_rng_state()},
                  tmp_path / f"c{compiled}.safetensors")
        model, opt, sched, step = _setup(compiled)
        ckpt = kiln.load(tmp_path / f"c{compiled}.safetensors")
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        kiln.set_rng_state(ckpt["rng"])
        runs.append(_train(model, opt, sched, step, batches[3:]))
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-6)


def test_optimizer_state_dict_round_trips_exactly(tmp_path):
    model = kiln.nn.Linear(4, 2)
    opt = kiln.optim.SGD([{"params": [model.weight], "lr": 0.1}, {"params": [model.bias], "lr": 0.01}],
                         momentum=0.9, nesterov=True)
    model(kiln.randn(3, 4)).sum().backward()
    opt.step()
    saved = opt.state_dict()
    kiln.save(saved, tmp_path / "opt.safetensors")
    loaded = kiln.load(tmp_path / "opt.safetensors")
    _assert_same(saved, loaded)
    assert list(loaded["state"]) == [0, 1]  # parameter indices stay ints


def test_resume_matches_pytorch_uninterrupted_training(tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((3, 5)).astype(np.float32)
    b0 = rng.standard_normal(3).astype(np.float32)
    data = [(rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32))
            for _ in range(6)]

    ref = torch.nn.Linear(5, 3)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(w0))
        ref.bias.copy_(torch.from_numpy(b0))
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.05, betas=(0.8, 0.9))
    expected = []
    for x, y in data:
        ref_opt.zero_grad()
        loss = ((ref(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
        loss.backward()
        ref_opt.step()
        expected.append(loss.item())

    def run(model, opt, part):
        out = []
        for x, y in part:
            opt.zero_grad()
            loss = ((model(kiln.from_numpy(x)) - kiln.from_numpy(y)) ** 2).mean()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    def build():
        model = kiln.nn.Linear(5, 3)
        model.load_state_dict({"weight": w0, "bias": b0})
        return model, kiln.optim.Adam(model.parameters(), lr=0.05, betas=(0.8, 0.9))

    model, opt = build()
    got = run(model, opt, data[:3])
    buffer = io.BytesIO()
    kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buffer)
    model, opt = build()
    buffer.seek(0)
    ckpt = kiln.load(buffer)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    got += run(model, opt, data[3:])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.weight.detach().numpy(), ref.weight.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("Adam", {"lr": 0.05, "betas": (0.8, 0.9), "amsgrad": True}),
    ("AdamW", {"lr": 0.05, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
    ("Adagrad", {"lr": 0.1}),
    ("Adadelta", {"lr": 1.0}),
])
def test_every_optimizer_resumes_exactly_through_a_checkpoint(name, kwargs):
    if not hasattr(kiln.optim, name):
        pytest.skip(f"kiln.optim.{name} does not exist yet")
    batches = _batches(6)

    def build():
        kiln.manual_seed(0)
        model = kiln.nn.Sequential(kiln.nn.Linear(6, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 3))
        return model, getattr(kiln.optim, name)(model.parameters(), **kwargs)

    def run(model, opt, part):
        for x, y in part:
            opt.zero_grad()
            kiln.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    model, opt = build()
    run(model, opt, batches)
    expected = [p.detach().numpy().copy() for p in model.parameters()]

    model, opt = build()
    run(model, opt, batches[:3])
    buffer = io.BytesIO()
    kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buffer)
    model, opt = build()
    buffer.seek(0)
    ckpt = kiln.load(buffer)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    run(model, opt, batches[3:])
    for got, want in zip(model.parameters(), expected):
        np.testing.assert_array_equal(got.detach().numpy(), want)
