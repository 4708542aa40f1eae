"""A compiled whole training step (zero_grad, forward, loss, backward, optimizer step) trains
exactly as eager does: 100-step loss trajectories, then parameters, buffers and optimizer
state, for the MLP, LeNet-5 and the GPT, on both backends (the eager run is the oracle)."""
from __future__ import annotations

import pytest

from whole_step_helpers import PAIRS, assert_same_run, train

# (optimizer, gradient clipping, micro-batches, cosine schedule): the acceptance configurations
CONFIGS = {
    "sgd_nesterov_wd": ("sgd_nesterov_wd", None, 0, False),
    "adamw_amsgrad_cosine": ("adamw_amsgrad", None, 0, True),
    "rmsprop": ("rmsprop", None, 0, False),
    "clip_norm": ("sgd_nesterov_wd", "norm", 0, False),
    "accumulate_4": ("adamw_amsgrad", None, 4, False),
}
FAST = {("mlp", name) for name in CONFIGS} | {("lenet", "sgd_nesterov_wd"), ("gpt", "adamw_amsgrad_cosine")}


def _cases() -> list:
    cases = []
    for model in ("mlp", "lenet", "gpt"):
        for name in CONFIGS:
            marks = () if (model, name) in FAST else (pytest.mark.slow,)
            for backend, dtype in PAIRS:
                cases.append(pytest.param(model, name, backend, dtype, marks=marks,
                                          id=f"{model}-{name}-{backend}-{dtype}"))
    return cases


@pytest.mark.parametrize("model, config, backend, dtype", _cases())
def test_100_steps_match_eager(model: str, config: str, backend: str, dtype: str) -> None:
    optimizer, clip, micro, cosine = CONFIGS[config]
    kw = dict(steps=100, dtype=dtype, clip=clip, micro=micro, cosine=cosine)
    want = train(model, optimizer, backend=None, **kw)
    got = train(model, optimizer, backend=backend, **kw)
    assert_same_run(got, want, dtype)
    stats = got.compiled.stats
    assert stats.fallbacks == 0
    assert stats.traces == 2  # the first step creates optimizer state; every later step replays one plan
    assert stats.hits == 98


@pytest.mark.parametrize("backend, dtype", PAIRS)
@pytest.mark.parametrize("optimizer, clip", [("sgd_dampening", "value"), ("adam_l2", None),
                                             ("rmsprop_plain", "norm")])
def test_more_options_match_eager(optimizer: str, clip: str | None, backend: str, dtype: str) -> None:
    kw = dict(steps=30, dtype=dtype, clip=clip)
    assert_same_run(train("mlp", optimizer, backend=backend, **kw), train("mlp", optimizer, backend=None, **kw), dtype)


@pytest.mark.parametrize("backend, dtype", PAIRS)
def test_batchnorm_and_dropout_inside_the_step(backend: str, dtype: str) -> None:
    kw = dict(steps=30, dtype=dtype)
    got = train("mlp_bn_dropout", "sgd_nesterov_wd", backend=backend, **kw)
    want = train("mlp_bn_dropout", "sgd_nesterov_wd", backend=None, **kw)
    assert_same_run(got, want, dtype)  # running stats are buffers in the model's state_dict
    assert got.compiled.stats.fallbacks == 0
