"""The functional ops of kiln: math and reductions, shapes and indexing, creation.

Everything here is differentiable where it makes sense and is exported both as
``kiln.<name>`` and (with the neural-network ops) as ``kiln.nn.functional.<name>``.
"""
from .creation import (arange, empty, empty_like, eye, full, full_like, linspace, normal, ones, ones_like,
                       rand, rand_like, randint, randn, randn_like, randperm, uniform, zeros, zeros_like)
from .math import (abs, add, all, amax, amin, any, argmax, argmin, bmm, cast, ceil, clamp, clip, cos,
                   cumsum, div, dot, einsum, eq, erf, exp, floor, floor_divide, ge, gt, isfinite, isinf,
                   isnan, le, log, log1p, logical_and, logical_not, logical_or, logsumexp, lt, matmul, max,
                   maximum, mean, min, minimum, mm, mul, ne, neg, norm, outer, pow, prod, reciprocal, relu,
                   remainder, round, rsqrt, rsub, sigmoid, sign, sin, sqrt, square, std, sub, sum, sum_to,
                   tanh, var, where)
from .shape import (bind_index, broadcast_tensors, broadcast_to, cat, chunk, clone, concat, concatenate,
                    contiguous, expand, flatten, flip, gather, getitem, index_add, index_copy, index_grad, index_put,
                    index_select, masked_fill, movedim, narrow, permute, reshape, scatter_add, select, split, squeeze,
                    stack, swapaxes, t, take_along_dim, transpose, tril, triu, unbind, unsqueeze, view)
from .compare import allclose, isclose
from .sampling import multinomial
from .sorting import argsort, sort, topk, unique
from .tiling import tile
from .nn import *  # noqa: F403 - the neural-network functional ops
from .nn import __all__ as _nn_all
from .activations_extra import hardshrink, logsigmoid, rrelu, softmin, softshrink

import sys as _sys
import types as _types

# Submodules (math, shape, nn, ...) stay out of `*`: `from kiln.functional import *` in
# kiln/__init__.py would otherwise shadow kiln.nn with kiln.functional.nn.
__all__ = [n for n, v in dict(globals()).items() if not n.startswith("_") and not isinstance(v, _types.ModuleType)]

from .. import late_bound as _late_bound

_late_bound.install_functional(_sys.modules[__name__])  # the primitives' VJPs call these ops (kiln/late_bound.py)
