"""kiln: eager tensors with autograd, nn and optim, and a tracing JIT compiler at the heart.

>>> import kiln
>>> x = kiln.randn(4, 3, requires_grad=True)
>>> (x.relu() ** 2).sum().backward()
"""
from . import dtypes as _dtypes
from .allocator import tune_allocator as _tune_allocator
from .autograd import (enable_grad, grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,
                       set_grad_enabled)
from .device import Device, cuda_is_available, get_device
from .dtypes import (DType, DTypeMismatchError, DTypeOverflowError, bfloat16, bool_, float16, float32, float64,
                     int32, int64)
from .ops.primitive import ShapeError
from .random import Generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state
from .tensor import Tensor, as_tensor, from_numpy, is_tensor, tensor
from . import tensor_methods as _tensor_methods  # noqa: F401 - attaches Tensor methods
from . import tensor_methods_compound as _tensor_methods_compound  # noqa: F401 - and more
from .functional import *  # noqa: F403
from .functional.diagonal import diag, diag_embed, diagonal, trace
from .functional.bitwise import bitwise_and, bitwise_not, bitwise_or, bitwise_xor, equal
from .functional.random_fill import bernoulli
from .functional.scatter import scatter, scatter_reduce
from .functional.trig import (acos, acosh, arccos, arccosh, arcsin, arcsinh, arctan, arctan2, arctanh, asin, asinh,
                              atan, atan2, atanh, cosh, sinh, tan)
from .functional.shape import roll
# (imported here, not by kiln.functional, which these modules build on)
from .functional.aliases import (absolute, divide, greater, greater_equal, less, less_equal, moveaxis, multiply,
                                 negative, not_equal, numel, ravel, subtract, swapdims, true_divide)
from .functional.compound import (addbmm, addcdiv, addcmul, addmm, addmv, addr, baddbmm, clamp_max, clamp_min,
                                  count_nonzero, diff, expm1, fix, frac, lerp, log2, log10, logaddexp, logit, nan_to_num,
                                  nanmean, nansum, sgn, std_mean, trunc, var_mean, xlogy)
from .functional.selection import (argwhere, bincount, bucketize, kthvalue, masked_select, median, msort, nonzero,
                                   quantile, searchsorted)
from .functional.rearrange import (atleast_1d, atleast_2d, atleast_3d, column_stack, dstack, fliplr, flipud, hstack,
                                   meshgrid, repeat_interleave, rot90, row_stack, tensor_split, tril_indices,
                                   triu_indices, unflatten, vstack)
from .dtype_info import (can_cast, finfo, iinfo, is_complex, is_floating_point, is_nonzero, promote_types,
                         result_type)
from .threads import get_num_threads, set_num_threads
from .legacy_tensors import (BFloat16Tensor, BoolTensor, DoubleTensor, FloatTensor, HalfTensor, IntTensor,
                             LongTensor)
from . import functional, autograd  # noqa: F401
from .functional.math import IntegerDivisionByZeroError  # noqa: E402
from . import nn, models  # noqa: F401,E402 - kiln.nn / kiln.models after `import kiln`

bool = bool_  # noqa: A001 - kiln.bool, as torch.bool
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
device = get_device

from .version import __version__  # noqa: E402
_tune_allocator()


def get_default_dtype() -> DType:
    return _dtypes.default_float

from .jit import (CompilationStats, CompiledFunction, GraphBreakError, JITFunction, JITModule,  # noqa: E402
                  compile, djit, xpr)
from . import jit  # noqa: E402 - the package, callable as the jit decorator (kiln.jit(f), kiln.jit.passes)
from . import data, optim  # noqa: E402,F401 - kiln.nn etc. after `import kiln`
from .io import load, save  # noqa: E402 - safetensors checkpoints; pickled objects need weights_only=False
from .interop import from_dlpack  # noqa: E402 - also attaches Tensor.__dlpack__ / __dlpack_device__
from . import io, onnx  # noqa: E402,F401 - kiln.onnx imports the onnx package only when exporting
from . import serialization  # noqa: E402,F401 - torch.serialization's names: safe_globals, add_safe_globals
from . import accelerator, amp, backends, cuda, utils  # noqa: E402,F401 - PyTorch's namespaces: kiln.cuda, ...
from .amp import autocast  # noqa: E402
from .backends import (are_deterministic_algorithms_enabled, get_float32_matmul_precision,  # noqa: E402
                       set_float32_matmul_precision, use_deterministic_algorithms)
from . import sparse  # noqa: E402,F401 - kiln.sparse; attaches Tensor.to_sparse, .to_dense, .is_sparse, .layout
from .sparse.exports import layout, sparse_coo, sparse_coo_tensor, spmm, strided  # noqa: E402


def __getattr__(name: str) -> object:
    """Lazy subpackages: ``kiln.distributed`` is imported on first access, so ``import kiln`` stays light."""
    if name == "distributed":
        import importlib  # noqa: PLC0415

        return importlib.import_module(".distributed", __name__)
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")
