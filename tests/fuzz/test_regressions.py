"""Every mismatch the differential fuzzer found, shrunk, kept as a permanent test.

Each test holds the shrunk program as a literal (paste-able from `python -m kiln.fuzz`
output) and asserts that eager and compiled runs agree on every backend; tests of
eager-side bugs also pin the expected eager values.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")  # kiln.fuzz imports it

import kiln  # noqa: E402
from kiln.fuzz.harness import check_program  # noqa: E402
from kiln.fuzz.programs import Input, Op, Program  # noqa: E402


def assert_agrees(program: Program) -> None:
    result = check_program(program)
    assert not result.mismatches, f"{program}\n" + "\n".join(result.mismatches)
    assert result.eager_error is None, result.eager_error


def test_backward_when_an_earlier_output_takes_no_cotangent():
    # The compiled backward looked cotangents up by output index in a list that skipped
    # non-differentiable outputs: IndexError on replay when a bool output came first.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((1,), 'float32', grad=True),                                       # v0
        Op('neg', (0,)),                                                         # v1
        Op('isnan', (0,)),                                                       # v2
    ], outputs=(2, 1)))


@pytest.mark.parametrize("name, params", [
    ("sum", {"dim": 0, "keepdim": False}), ("amax", {"dim": -1, "keepdim": True}),
    ("amin", {"dim": 0, "keepdim": False}), ("prod", {"dim": 0, "keepdim": False}),
    ("mean", {"dim": (0,), "keepdim": True}), ("logsumexp", {"dim": 0, "keepdim": False}),
    ("softmax", {"dim": 0}), ("log_softmax", {"dim": -1}), ("cumsum", {"dim": 0}),
    ("any", {"dim": 0, "keepdim": False}),
])
def test_reductions_over_dim_0_of_a_0d_tensor(name, params):
    # NumPy has no axis 0 on a 0-d array; PyTorch accepts dim 0 / -1 there (eager raised).
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((), 'float32', grad=name != "any"),                                # v0
        Op(name, (0,), params),                                                  # v1
    ], outputs=(1,)))


def test_0d_reductions_match_pytorch_semantics():
    x = kiln.tensor(2.0, requires_grad=True)
    for fn, value, grad in [(lambda t: kiln.sum(t, 0), 2.0, 1.0), (lambda t: kiln.amax(t, -1, True), 2.0, 1.0),
                            (lambda t: kiln.prod(t, 0), 2.0, 1.0), (lambda t: kiln.cumsum(t, 0), 2.0, 1.0),
                            (lambda t: kiln.nn.functional.softmax(t, 0), 1.0, 0.0)]:
        x.grad = None
        y = fn(x)
        assert y.shape == () and float(y) == value
        y.backward()
        assert float(x.grad) == grad


def test_output_without_a_differentiable_path_still_requires_grad():
    # floor_divide has no gradient: the compiled replay returned requires_grad=False where
    # eager (and PyTorch) return True.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((1,), 'float32', grad=True),                                       # v0
        Op('floor_divide', (0, 0)),                                              # v1
    ], outputs=(1,)))


def test_inplace_update_of_an_input_with_a_value_that_requires_grad():
    # x.add_(y) on an argument x with y requiring grad: eager puts x in the autograd graph;
    # the compiled replay returned x without a grad_fn and y's gradient was silently lost.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((1, 1), 'float32'),                                                # v0
        Input((1, 1), 'float32', grad=True),                                     # v1
        Op('input_iadd', (0, 1)),                                                # v2
    ], outputs=(2,)))


def test_inplace_update_with_a_wider_dtype_keeps_the_target_dtype():
    # t = x.clone(); t.sub_(float64 y): t stays float32 eagerly; the trace carried the
    # float64 value on, so the compiled output was float64.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((1,), 'float32'),                                                  # v0
        Input((1,), 'float64'),                                                  # v1
        Op('isub', (0, 1)),                                                      # v2
    ], outputs=(2,)))


def test_inplace_update_with_a_wider_dtype_gives_grads_in_the_source_dtype():
    # ...and eagerly the float64 y got a float32 .grad (the node of the update was adopted as is).
    x = kiln.randn(3)
    y = kiln.randn(3, dtype=kiln.float64, requires_grad=True)
    t = x.clone()
    t.add_(y)
    (t * 2).sum().backward()
    assert t.dtype == kiln.float32
    assert y.grad.dtype == kiln.float64
    np.testing.assert_array_equal(y.grad.numpy(), np.full(3, 2.0))
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((3,), 'float32'),                                                  # v0
        Input((3,), 'float64', grad=True),                                       # v1
        Op('iadd', (0, 1)),                                                      # v2
        Op('mul_scalar', (2,), {'c': 2.0}),                                      # v3
    ], outputs=(3,)))


# ---- dynamic_dims: the harness also compiles with dynamic_dims={arg: {0: "B"}} for every
# input whose leading dim has the first input's size, and calls at B and B + 1 ----------
def test_dynamic_dim_of_size_1_is_specialized():
    # Traced at B=1, squeeze(0) dropped the dim; the plan was replayed for B=2 and failed (and
    # other size-1 programs - sums, broadcasts - were silently wrong). Sizes 0 and 1 stay concrete.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((1,), 'float32'),                                                  # v0
        Op('squeeze', (0,), {'dim': 0}),                                         # v1
    ], outputs=(1,)))
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((1, 1), 'float32', grad=True),                                     # v0
        Input((1,), 'float32'),                                                  # v1
        Op('layer_norm', (0, 1), {'shape': (1,)}),                               # v2
    ], outputs=(2,)))


def test_dynamic_dim_random_draws_advance_by_the_call_size():
    # The random stream advanced by the count seen at trace time, so a second draw at another
    # size overlapped the first one's numbers.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((2, 2), 'float32'),                                                # v0
        Op('randn_add', (0,)),                                                   # v1
        Op('randn_add', (0,)),                                                   # v2
    ], outputs=(2,)))
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((3,), 'float32'),                                                  # v0 (odd, then even)
        Op('randn_add', (0,)),                                                   # v1
        Op('randn_add', (0,)),                                                   # v2
    ], outputs=(2,)))


def test_dynamic_dim_batch_norm_running_var_uses_the_call_count():
    # numel() was a plain int while tracing: the unbiased-variance factor n / (n - 1) was baked in.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((2, 1), 'float32'),                                                # v0
        Input((1,), 'float32'),                                                  # v1
        Input((1,), 'float32'),                                                  # v2
        Op('batch_norm', (0, 1, 2), {'training': True, 'momentum': 0.1}),        # v3
    ], outputs=(3,)))


def test_dynamic_dim_label_smoothing_divides_by_the_call_class_count():
    # label_smoothing / n_classes is float / SymInt, which Python evaluates as a plain float.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((2,), 'float32'),                                                  # v0
        Input((2,), 'float32', fill='unit'),                                     # v1
        Op('cross_entropy', (0, 1), {'reduction': 'mean', 'smoothing': 0.1}),    # v2
    ], outputs=(2,)))


def test_dynamic_dim_split_into_many_chunks():
    # Chunk starts were a running sum of symbolic sizes: 960 chunks nested the expression 960
    # deep and printing it hit RecursionError.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((4096,), 'float32'),                                               # v0
        Op('chunk', (0,), {'chunks': 960, 'dim': 0, 'part': 7}),                 # v1
    ], outputs=(1,)))


def test_dynamic_dim_python_branches_on_sizes_are_guarded():
    # Python branches on symbolic sizes were baked into the plan: split's min(step, n - k*step)
    # chose the last chunk's length at trace time (2B+1 got the wrong chunk), and sum_to's
    # `size != 1` check on a derived size B-1 == 1 skipped a reduction (wrong grad shape at B+1).
    # Comparisons now record shape guards; a plan whose guards fail retraces.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((2048, 1), 'float32'),                                             # v0
        Op('split', (0,), {'size': 1025, 'dim': 0, 'part': 1}),                  # v1
    ], outputs=(1,)))
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((2, 1), 'float32'),                                                # v0
        Op('pad', (0,), {'pads': (0, 1, 0, -1), 'value': 0.0}),                  # v1
        Input((1, 1), 'float32', grad=True),                                     # v2
        Op('add', (2, 1)),                                                       # v3
    ], outputs=(3,)))
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((2, 1, 1), 'float32'),                                             # v0
        Op('getitem', (0,), {'index': (('s', 3, None, None), ('e',), ('i', 0))}), # v1
        Op('randn_add', (1,)),                                                   # v2
    ], outputs=(2,)))


def test_dynamic_dim_plans_still_share_across_sizes():
    # ...while shape checks between different dims (B vs 16) guard nothing: one plan serves all.
    from kiln.models import gpt

    model = gpt(50, 2, 2, 16, 16)
    f = kiln.compile(model, dynamic_dims={0: {0: "B", 1: "T"}})
    for b, t in [(2, 8), (3, 5), (4, 12), (16, 16)]:
        idx = kiln.randint(0, 50, (b, t))
        np.testing.assert_allclose(f(idx).detach().numpy(), model(idx).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert f.stats.misses == 1


def test_detach_of_a_tensor_updated_through_a_view():
    # t = x.clone(); t[..., :] += 2; t.detach(): detach read t's value from before the update
    # (the stale-read check covered every read but detach), so the replay lost the update.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((1, 1, 1), 'float32'),                                             # v0
        Op('getitem', (0,), {'index': (('i', 0), ('e',), ('s', None, None, None))}), # v1
        Op('view_iadd', (1,), {'index': (('e',), ('s', None, None, None)), 'value': 2.0}), # v2
        Op('detach', (2,)),                                                      # v3
    ], outputs=(3,)))


def test_double_backward_through_a_compiled_function_raises_instead_of_dropping_terms():
    # Found probing the harness's cotangent path with create_graph=True: the compiled backward
    # returned grads without a grad_fn, so a gradient penalty (y + |dy/dx|^2) silently lost its
    # term. Those grads now require grad and raise when differentiated through.
    def f(x):
        return (x.sin() * x).sum()

    compiled = kiln.compile(f)
    compiled(kiln.randn(3, requires_grad=True))  # the trace call
    x = kiln.randn(3, requires_grad=True)
    (g,) = kiln.autograd.grad(compiled(x), x, create_graph=True)  # the replay: first order works
    (want,) = kiln.autograd.grad(f(x), x)
    np.testing.assert_allclose(g.detach().numpy(), want.numpy(), rtol=1e-6)
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="double backward"):
        (g * g).sum().backward()


# ---- not kiln bugs: rounding the harness must accept (its tolerance model is under test) ----
@pytest.mark.parametrize("program", [
    # fused C pow rounds a float32 ulp apart from NumPy's SIMD pow, then a cast to float64
    Program(dtype='float32', seed=0, stmts=[
        Input((4096,), 'float32'), Op('rsqrt', (0,)), Op('cast', (1,), {'dtype': 'float64'}),
    ], outputs=(2,)),
    # float32 math widened by a float64 bias, at a dynamic size
    Program(dtype='float32', seed=0, stmts=[
        Input((1, 4096), 'float32'), Input((4096,), 'float32'), Input((4096,), 'float32'),
        Input((4096,), 'float32'), Input((4096,), 'float64'),
        Op('batch_norm', (0, 1, 2, 3, 4), {'training': False, 'momentum': 0.1}),
    ], outputs=(5,)),
    # the compiled backward sums (g + p) - p where eager sums g + (p - p): layer_norm over one element
    Program(dtype='float32', seed=0, stmts=[
        Input((4096, 1), 'float32', grad=True), Op('layer_norm', (0,), {'shape': (1,)}), Op('add', (0, 0)),
    ], outputs=(2, 1)),
    # a huge weight: layer_norm's backward cancels terms near 1e37 down to 1e32
    Program(dtype='float32', seed=501, stmts=[
        Input((4096,), 'float32'), Op('neg', (0,)), Input((4096,), 'float32'), Op('neg', (2,)),
        Input((4096, 1, 2), 'float32', grad=True), Input((2,), 'float32', fill='special'),
        Input((2,), 'float32'), Op('layer_norm', (4, 5, 6), {'shape': (2,)}),
    ], outputs=(7,)),
], ids=["pow-cast", "mixed-precision-bn", "reordered-grad-sum", "huge-cancellation"])
def test_rounding_differences_are_not_mismatches(program):
    assert_agrees(program)


def _attention_under_adam(lr: float):
    from kiln.fuzz.modules import Layer, ModuleProgram  # noqa: PLC0415

    return ModuleProgram(layers=[
        Layer('Embedding', (2, 3)),
        Layer('TransformerEncoderLayer', (3, 1), {'dim_feedforward': 1, 'dropout': 0.0, 'activation': 'relu',
                                                  'batch_first': True, 'norm_first': False}),
        Layer('Flatten'),
        Layer('Linear', (6, 2)),
    ], input_shape=(2, 2), classes=2, loss='cross_entropy', optimizer='Adam', opt_kwargs={'lr': lr}, steps=3,
        dtype='float32', seed=0, mode='module', vocab=2)


@pytest.mark.parametrize("lr", [0.01, 0.1])
def test_adam_amplified_rounding_in_a_zero_gradient_is_not_a_mismatch(lr):
    # The attention key's bias has a zero gradient in exact arithmetic (softmax ignores a shift), so
    # both eager and compiled hand Adam rounding noise (~1e-10), which Adam divides by its own size:
    # the biases then moved apart by up to lr per step. Eager runs whose rounding was nudged by an
    # ulp diverge the same way, and the trajectory comparison now allows what they show.
    from kiln.fuzz.modules import check_module_program  # noqa: PLC0415

    assert check_module_program(_attention_under_adam(lr)) == []


def test_a_real_parameter_difference_is_still_a_mismatch():
    from kiln.fuzz.modules import compare_trajectories, train  # noqa: PLC0415
    from kiln.fuzz.harness import rounding_noise  # noqa: PLC0415

    program = _attention_under_adam(0.01)
    eager, compiled = train(program, None), train(program, "cpu")
    noisy = []
    for seed in (1, 2, 3):
        with rounding_noise(seed):
            noisy.append(train(program, None))
    assert compare_trajectories("[cpu]", compiled, eager, lambda: noisy) == []
    compiled.params[-1] = compiled.params[-1] + np.float32(1e-3)  # the output layer's bias, off by 1e-3
    problems = compare_trajectories("[cpu]", compiled, eager, lambda: noisy)
    assert len(problems) == 1 and "param" in problems[0], problems


def test_a_fused_float32_transcendental_of_a_0d_value_is_within_its_ulp_bound():
    # Compiled float32 exp (render/vecmath.py) is 1 ulp from NumPy's here, inside the documented 4 ulp,
    # and the float64 result carries that ulp. The harness's rounding noise, which measures such slack,
    # skipped 0-d results (NumPy returns them as scalars, not arrays), so it allowed only float64 noise.
    assert_agrees(Program(dtype='float64', seed=4164, stmts=[
        Input((), 'float32', fill='positive'),                                   # v0
        Input((), 'float64', fill='unit'),                                       # v1
        Op('bce_with_logits', (0, 1), {'reduction': 'mean'}),                    # v2
    ], outputs=(2,)))


@pytest.mark.parametrize("program", [
    Program(dtype='float32', seed=3, stmts=[
        Input((1, 3, 4, 4), 'float32', grad=True),                               # v0
        Input((2, 3, 1, 3), 'float32', grad=True),                               # v1
        Op('conv2d', (0, 1), {'stride': 1, 'padding': 1, 'dilation': 1, 'groups': 1}), # v2
    ], outputs=(2,)),
    Program(dtype='float64', seed=0, stmts=[
        Input((2, 2, 4, 6), 'float64'),                                          # v0
        Input((1, 2, 1, 1), 'float64'),                                          # v1
        Op('conv2d', (0, 1), {'stride': 1, 'padding': 1, 'dilation': 1, 'groups': 1}), # v2
    ], outputs=(2,)),
])
def test_padded_convolutions_whose_im2col_loops_gcc_miscompiled(program):
    # The native unfold2d's loops tested each element, then each row, for padding; GCC 12.2 at -O3
    # with -march=native vectorized both into code that wrote padding over copied rows (up to 2.9 off).
    assert_agrees(program)


def test_a_0d_softmax_in_a_plan_with_a_symbolic_dim():
    # Symbolic fusion looked up the size of the reduced axis 0 of a 0-d input: IndexError, with
    # dynamic_dims on the other argument only.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((), 'float32'),                                                    # v0
        Input((1,), 'float32'),                                                  # v1
        Op('softmax', (0,), {'dim': 0}),                                         # v2
    ], outputs=(2,)))


def test_two_equal_gathers_and_a_view_of_one_come_back_in_separate_memory():
    # The plan computed the two gathers once and returned the reshape as a view of it: a write
    # through one output showed in the other, where eager's outputs share no memory.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((1,), 'float32'),                                                  # v0
        Input((1,), 'int64', fill='index:1'),                                    # v1
        Op('gather', (0, 1), {'dim': 0}),                                        # v2
        Op('gather', (0, 1), {'dim': 0}),                                        # v3
        Op('reshape', (3,), {'shape': ()}),                                      # v4
    ], outputs=(4, 2)))


@pytest.mark.parametrize("seed", [0, 1])
def test_binary_cross_entropy_checks_nan_probabilities_when_replayed(seed):
    # Eager raised on NaN probabilities (sigmoid of NaN); the compiled plan did not check. The
    # check is now a graph node; a call that raises is not counted in the stats (seed 1: the
    # first call's data is clean, the replay's is not).
    program = Program(dtype='float32', seed=seed, stmts=[
        Input((2, 2), 'float32', fill='special'),                                # v0
        Op('sigmoid', (0,)),                                                     # v1
        Input((2, 2), 'float32', fill='unit'),                                   # v2
        Op('bce', (1, 2), {'reduction': 'mean'}),                                # v3
    ], outputs=(3,))
    result = check_program(program)
    assert not result.mismatches, "\n".join(result.mismatches)


def test_djit_indexes_a_pending_result_with_an_index_tensor():
    # djit remade views of pending results from their base alone after the plan ran; an index
    # view also reads its index tensor (StopIteration inside the kernel). Such views are now
    # computed by the plan, as advanced indexing copies anyway.
    assert_agrees(Program(dtype='float32', seed=0, stmts=[
        Input((), 'float32'),                                                    # v0
        Input((1,), 'float32'),                                                  # v1
        Op('add', (1, 0)),                                                       # v2
        Input((), 'int64', fill='index:1'),                                      # v3
        Op('index_select', (2, 3), {'dim': 0}),                                  # v4
    ], outputs=(4,)))


def test_a_python_branch_on_tensor_data_agrees_on_both_paths():
    for seed in range(4):  # the branch goes both ways over these seeds' data
        assert_agrees(Program(dtype='float32', seed=seed, stmts=[
            Input((3,), 'float32'),                                              # v0
            Input((2, 3), 'float32'),                                            # v1
            Input((1, 3), 'float32'),                                            # v2
            Op('branch', (0, 1, 2)),                                             # v3
            Op('exp', (3,)),                                                     # v4
        ], outputs=(4,)))
