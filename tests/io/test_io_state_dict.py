"""kiln.load feeding Module.load_state_dict: the same clear errors as an in-memory state dict."""
from __future__ import annotations

import numpy as np
import pytest

import kiln


def _error_of(model: kiln.nn.Module, state: dict) -> str:
    with pytest.raises(RuntimeError) as info:
        model.load_state_dict(state)
    return str(info.value)


def test_wrong_shape_file_gives_load_state_dict_error(tmp_path):
    kiln.save(kiln.models.mlp(16, (8,), 4).state_dict(), tmp_path / "small.safetensors")
    model = kiln.models.mlp(16, (12,), 4)
    from_file = _error_of(model, kiln.load(tmp_path / "small.safetensors"))
    in_memory = _error_of(model, kiln.models.mlp(16, (8,), 4).state_dict())
    assert from_file == in_memory
    assert "size mismatch for 0.weight: copying a param with shape (8, 16)" in from_file
    assert "the shape in current model is (12, 16)" in from_file


def test_missing_and_unexpected_keys_give_load_state_dict_error(tmp_path):
    state = kiln.models.mlp(16, (8,), 4).state_dict()
    del state["2.bias"]
    state["extra"] = kiln.zeros(1)
    kiln.save(state, tmp_path / "partial.safetensors")
    model = kiln.models.mlp(16, (8,), 4)
    message = _error_of(model, kiln.load(tmp_path / "partial.safetensors"))
    assert message == _error_of(model, state)
    assert 'Missing key(s) in state_dict: "2.bias"' in message
    assert 'Unexpected key(s) in state_dict: "extra"' in message


def test_non_strict_load_from_file_reports_keys(tmp_path):
    state = kiln.models.mlp(16, (8,), 4).state_dict()
    del state["0.bias"]
    kiln.save(state, tmp_path / "partial.safetensors")
    result = kiln.models.mlp(16, (8,), 4).load_state_dict(kiln.load(tmp_path / "partial.safetensors"),
                                                          strict=False)
    assert result.missing_keys == ["0.bias"] and result.unexpected_keys == []


def test_buffers_round_trip_with_the_model(tmp_path):
    model = kiln.nn.Sequential(kiln.nn.Conv2d(1, 2, 3), kiln.nn.BatchNorm2d(2))
    model(kiln.randn(4, 1, 6, 6))  # updates running stats and num_batches_tracked
    kiln.save(model.state_dict(), tmp_path / "bn.safetensors")
    fresh = kiln.nn.Sequential(kiln.nn.Conv2d(1, 2, 3), kiln.nn.BatchNorm2d(2))
    fresh.load_state_dict(kiln.load(tmp_path / "bn.safetensors"))
    for (name, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    assert fresh.state_dict()["1.num_batches_tracked"].dtype == kiln.int64


def test_load_state_dict_keeps_parameter_objects(tmp_path):
    model = kiln.models.lenet_5()
    kiln.save(kiln.models.lenet_5().state_dict(), tmp_path / "l.safetensors")
    params = list(model.parameters())
    model.load_state_dict(kiln.load(tmp_path / "l.safetensors"))
    assert all(a is b for a, b in zip(params, model.parameters()))
