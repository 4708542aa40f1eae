"""Bad input gets a specific exception whose message names the op and what came."""
from __future__ import annotations

import numpy as np
import pytest

import kiln


def test_matmul_shape_mismatch_names_op_and_shapes() -> None:
    a, b = kiln.ones(2, 3), kiln.ones(4, 5)
    with pytest.raises(kiln.ShapeError) as info:
        kiln.matmul(a, b)
    msg = str(info.value)
    assert "matmul" in msg and "(2, 3)" in msg and "(4, 5)" in msg
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):  # ShapeError is a ValueError
        a @ b


def test_matmul_1d_mismatch_shows_the_user_shapes() -> None:
    with pytest.raises(kiln.ShapeError, match=r"matmul.*\(3,\).*\(4,\)"):
        kiln.matmul(kiln.ones(3), kiln.ones(4))
    with pytest.raises(kiln.ShapeError, match=r"matmul.*\(2, 3\).*\(4,\)"):
        kiln.ones(2, 3) @ kiln.ones(4)
    with pytest.raises(kiln.ShapeError, match=r"matmul.*\(2, 2, 3\).*\(2, 4, 5\)"):
        kiln.ones(2, 2, 3) @ kiln.ones(2, 4, 5)


def test_matmul_batch_mismatch_names_shapes() -> None:
    with pytest.raises(kiln.ShapeError, match=r"matmul.*\(2, 2, 3\).*\(3, 3, 4\)"):
        kiln.ones(2, 2, 3) @ kiln.ones(3, 3, 4)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum"])
def test_binary_broadcast_mismatch_names_op_and_shapes(op: str) -> None:
    with pytest.raises(kiln.ShapeError) as info:
        getattr(kiln, op)(kiln.ones(2, 3), kiln.ones(4, 3))
    msg = str(info.value)
    assert op in msg and "(2, 3)" in msg and "(4, 3)" in msg


def test_add_operator_mismatch() -> None:
    with pytest.raises(kiln.ShapeError, match=r"add.*\(3,\).*\(4,\)"):
        kiln.ones(3) + kiln.ones(4)


def test_cat_mismatch_names_op_and_shapes() -> None:
    with pytest.raises(kiln.ShapeError) as info:
        kiln.cat([kiln.ones(2, 3), kiln.ones(2, 4)], dim=0)
    msg = str(info.value)
    assert "cat" in msg and "(2, 3)" in msg and "(2, 4)" in msg
    with pytest.raises(kiln.ShapeError, match=r"cat.*\(2, 3\).*\(3,\)"):
        kiln.cat([kiln.ones(2, 3), kiln.ones(3)])
    with pytest.raises(kiln.ShapeError, match=r"stack.*\(2, 3\).*\(3, 2\)"):
        kiln.stack([kiln.ones(2, 3), kiln.ones(3, 2)])


def test_reshape_and_expand_errors_name_shapes() -> None:
    with pytest.raises(kiln.ShapeError, match=r"reshape.*\(2, 3\).*\(4, 2\)"):
        kiln.ones(2, 3).reshape(4, 2)
    with pytest.raises(kiln.ShapeError, match=r"expand.*\(3,\).*\(2, 4\)"):
        kiln.ones(3).expand(2, 4)


def test_reduction_dim_out_of_range() -> None:
    with pytest.raises(IndexError, match="out of range"):
        kiln.ones(2, 3).sum(2)
    with pytest.raises(IndexError, match="out of range"):
        kiln.ones(2, 3).mean(dim=-3)


def test_conv_and_linear_errors() -> None:
    with pytest.raises(kiln.ShapeError, match="conv2d"):
        kiln.conv2d(kiln.ones(1, 3, 5, 5), kiln.ones(4, 2, 3, 3))
    with pytest.raises(kiln.ShapeError, match=r"linear.*\(2, 3\).*\(4, 5\)"):
        kiln.linear(kiln.ones(2, 3), kiln.ones(4, 5))


def test_loss_shape_errors() -> None:
    with pytest.raises(kiln.ShapeError, match="mse_loss"):
        kiln.mse_loss(kiln.ones(2, 3), kiln.ones(3, 2))
    with pytest.raises(kiln.ShapeError, match="nll_loss"):
        kiln.cross_entropy(kiln.ones(4, 3), kiln.tensor([0, 1, 2]))


@pytest.mark.parametrize("bad", ["float128", "complex64", "floaty", object()])
def test_unknown_dtype_is_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="dtype"):
        kiln.zeros(2, dtype=bad)
    with pytest.raises(TypeError, match="float32"):  # the message lists what is supported
        kiln.tensor([1.0], dtype=bad)


def test_unknown_dtype_in_to() -> None:
    with pytest.raises(TypeError, match="unknown dtype"):
        kiln.ones(2).to("float8")


@pytest.mark.parametrize("bad", ["tpu", "gpu:x", "cuda:x", "mps"])
def test_unknown_device_is_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match="device"):
        kiln.zeros(2, device=bad)
    with pytest.raises(ValueError, match="cpu"):
        kiln.tensor([1.0], device=bad)
    with pytest.raises(ValueError):
        kiln.device(bad)


def test_requires_grad_on_int_tensor_raises() -> None:
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.arange(3).requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.zeros(2, dtype=kiln.bool).requires_grad_(True)


def test_item_on_many_elements() -> None:
    with pytest.raises((ValueError, RuntimeError), match="one element"):
        kiln.ones(3).item()


def test_bool_of_many_elements_is_ambiguous() -> None:
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(kiln.ones(3))


def test_numpy_on_requires_grad() -> None:
    with pytest.raises(RuntimeError, match="detach"):
        kiln.ones(2, requires_grad=True).numpy()


def test_tensor_from_bad_data() -> None:
    with pytest.raises((TypeError, ValueError)):
        kiln.tensor([[1.0, 2.0], [3.0]])
    with pytest.raises(TypeError):
        kiln.tensor({"a": 1})


def test_einsum_errors() -> None:
    with pytest.raises(ValueError, match="two operands"):
        kiln.einsum("ij,jk,kl->il", kiln.ones(2, 2), kiln.ones(2, 2), kiln.ones(2, 2))
    with pytest.raises(kiln.ShapeError, match="einsum"):
        kiln.einsum("ij,jk->ik", kiln.ones(2, 3), kiln.ones(4, 2))


def test_index_out_of_range() -> None:
    with pytest.raises(IndexError):
        kiln.ones(2, 3)[5]
    with pytest.raises(IndexError):
        kiln.ones(2, 3)[:, kiln.tensor([0, 7])]


def test_float_index_is_rejected() -> None:
    with pytest.raises(IndexError, match="integer or bool"):
        kiln.ones(3)[kiln.tensor([0.0, 1.0])]


def test_errors_leave_numpy_state_clean() -> None:
    """A failing op leaves no half-built autograd state behind (the next op works)."""
    x = kiln.ones(2, 3, requires_grad=True)
    with pytest.raises(kiln.ShapeError):
        x @ kiln.ones(2, 3)
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 2.0))


def test_a_sequence_of_tensors_is_not_an_arithmetic_operand():
    """x - x.max(dim) is x minus the pair (values, indices): PyTorch raises TypeError; NumPy would stack
    the pair into a (2, ...) array and broadcast a wrong answer of another shape."""
    x = kiln.randn(3, 4)
    with pytest.raises(TypeError, match="use .values"):
        x - x.max(-1, keepdim=True)
    with pytest.raises(TypeError, match="list of tensors"):
        [x, x] * x
    np.testing.assert_array_equal((x - [1.0, 2.0, 3.0, 4.0]).numpy(), x.numpy() - np.float32([1, 2, 3, 4]))
