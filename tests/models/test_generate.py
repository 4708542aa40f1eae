"""GPT.generate and its key/value caches: the cached forward against the full forward (the
oracle), compiled generation against eager bit for bit, one plan for every decode position."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.models as models
from kiln.jit.backends.cpu import runtime


def _model(dtype: str = "float64", block_size: int = 48) -> models.GPT:
    kiln.manual_seed(0)
    model = models.gpt(vocab=23, n_layer=2, n_head=2, d_model=16, block_size=block_size).eval()
    return model.double() if dtype == "float64" else model


def _prompt(batch: int = 2, length: int = 5) -> kiln.Tensor:
    return kiln.tensor(np.random.default_rng(length).integers(0, 23, (batch, length)))


def _caches(model: models.GPT) -> list[np.ndarray]:
    return [c.numpy().copy() for block in model.blocks for c in (block.attn.kv_cache.k, block.attn.kv_cache.v)]


def test_cached_forward_gives_the_full_forwards_logits_at_every_position():
    model, idx = _model(), _prompt()
    model.setup_caches(2)
    with kiln.no_grad():
        logits = model(idx, kiln.arange(5))
        np.testing.assert_allclose(logits.numpy(), model(idx).numpy(), rtol=1e-12, atol=1e-12)
        tokens = np.random.default_rng(1).integers(0, 23, (2, 12))
        for t in range(12):
            step = kiln.tensor(tokens[:, t:t + 1])
            logits = model(step, kiln.tensor([5 + t]))
            idx = kiln.cat([idx, step], 1)
            np.testing.assert_allclose(logits[:, -1].numpy(), model(idx)[:, -1].numpy(), rtol=1e-12, atol=1e-12,
                                       err_msg=f"position {5 + t}")


def test_the_cache_holds_each_positions_keys_and_nothing_after_them():
    model, idx = _model(), _prompt()
    model.setup_caches(2)
    with kiln.no_grad():
        model(idx, kiln.arange(5))
    cache = model.blocks[0].attn.kv_cache.k.numpy()
    assert np.abs(cache[:, :, :5]).sum() > 0 and not cache[:, :, 5:].any()
    assert all("kv_cache" not in name for name in model.state_dict())


def test_greedy_generation_with_the_cache_equals_generation_without_it():
    model, idx = _model(), _prompt()
    cached = model.generate(idx, 20, temperature=0)
    assert tuple(cached.shape) == (2, 25)
    assert np.array_equal(cached.numpy(), model.generate(idx, 20, temperature=0, use_cache=False).numpy())
    np.testing.assert_array_equal(cached[:, :5].numpy(), idx.numpy())


def test_generation_past_block_size_reruns_the_last_block_size_tokens():
    model, idx = _model(block_size=16), _prompt()
    out = model.generate(idx, 20, temperature=0)  # 25 > 16 tokens: no cache, a sliding window
    assert np.array_equal(out.numpy(), model.generate(idx, 20, temperature=0, use_cache=False).numpy())
    want = idx
    with kiln.no_grad():
        for _ in range(20):
            want = kiln.cat([want, model(want[:, -16:])[:, -1].argmax(-1, keepdim=True)], 1)
    assert np.array_equal(out.numpy(), want.numpy())


def test_compiled_generation_is_eager_bit_for_bit_with_one_plan_for_every_decode_position():
    eager_model, idx = _model(), _prompt()
    want = eager_model.generate(idx, 30, temperature=0)
    want_caches = _caches(eager_model)
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no retrace warning either
        got = model.generate(idx, 30, temperature=0, compile=True)
    assert np.array_equal(got.numpy(), want.numpy())
    for a, b in zip(_caches(model), want_caches):
        assert np.array_equal(a, b)
    compiled = model._compiled
    assert compiled.stats.traces == 2  # the prompt, then one decode plan for positions 5 .. 33
    assert all(isinstance(entry.plan, runtime.NativePlan) for entry in compiled.cache_entries)
    again = model.generate(idx, 30, temperature=0, compile=True)  # the caches are reset by the prompt's writes
    assert np.array_equal(again.numpy(), want.numpy()) and compiled.stats.traces == 2


def test_compiled_sampling_draws_eagers_tokens_and_leaves_the_same_rng_state():
    model, idx = _model("float32"), _prompt()
    kiln.manual_seed(7)
    want = model.generate(idx, 16, temperature=0.8, top_k=5)
    want_next = kiln.rand(3).numpy()
    kiln.manual_seed(7)
    got = model.generate(idx, 16, temperature=0.8, top_k=5, compile=True)
    assert np.array_equal(got.numpy(), want.numpy())
    assert np.array_equal(kiln.rand(3).numpy(), want_next)


def test_top_k_keeps_only_the_k_likeliest_tokens():
    logits = kiln.tensor([[0.0, 5.0, 1.0, 4.0, -2.0]])
    kiln.manual_seed(0)
    drawn = {int(models.GPT._sample(logits, 1.0, 2)[0, 0]) for _ in range(200)}
    assert drawn == {1, 3}
    assert int(models.GPT._sample(logits, 0.0, None)[0, 0]) == 1


def test_a_new_batch_size_gets_new_caches():
    model = _model()
    model.generate(_prompt(batch=2), 3, temperature=0)
    out = model.generate(_prompt(batch=3), 3, temperature=0)
    assert tuple(out.shape) == (3, 8) and model.blocks[0].attn.kv_cache.k.shape[0] == 3


def test_bad_cache_use_raises_clear_errors():
    model, idx = _model(), _prompt()
    with pytest.raises(RuntimeError, match="setup_caches"):
        model(idx, kiln.arange(5))
    model.setup_caches(2)
    with pytest.raises(TypeError, match=r"input_pos must hold the 5 positions"):
        model(idx, kiln.arange(4))
    with pytest.raises(TypeError, match="input_pos"):
        model(idx, kiln.arange(5).double())
    with pytest.raises(ValueError, match="max_len"):
        model.setup_caches(2, max_len=49)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(idx, 3, temperature=-1.0)


def test_a_model_that_generated_compiled_still_copies_and_saves(tmp_path):
    import copy

    model, idx = _model(), _prompt()
    want = model.generate(idx, 5, temperature=0, compile=True)
    twin = copy.deepcopy(model)
    assert "_compiled" not in twin.__dict__
    assert np.array_equal(twin.generate(idx, 5, temperature=0).numpy(), want.numpy())
    kiln.save(model, tmp_path / "gpt.pt")
    loaded = kiln.load(tmp_path / "gpt.pt", weights_only=False)
    assert np.array_equal(loaded.generate(idx, 5, temperature=0, compile=True).numpy(), want.numpy())


def test_caches_too_short_for_the_request_are_made_again():
    model, idx = _model(), _prompt()
    model.setup_caches(2, max_len=8)
    out = model.generate(idx, 20, temperature=0)
    assert model.blocks[0].attn.kv_cache.k.shape[2] == 48
    assert np.array_equal(out.numpy(), model.generate(idx, 20, temperature=0, use_cache=False).numpy())
