"""The differential fuzzer's quick CI budget: random programs, eager vs compiled on every backend.

Deterministic (derandomized hypothesis); a failure shrinks to a minimal program, printed
as paste-able source for tests/fuzz/test_regressions.py. Longer runs: python -m kiln.fuzz.
"""
from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

import kiln  # noqa: E402
from kiln.fuzz.harness import check_program  # noqa: E402
from kiln.fuzz.modules import check_module_program, module_programs  # noqa: E402
from kiln.fuzz.programs import Input, Op, Program, make_inputs, run_program  # noqa: E402
from kiln.fuzz.strategies import programs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

CI = settings(deadline=None, derandomize=True, database=None, print_blob=False,
              suppress_health_check=list(HealthCheck))


@settings(CI, max_examples=150)
@given(programs())
def test_programs_agree_eager_and_compiled(program):
    result = check_program(program)
    assert not result.mismatches, "\n".join(result.mismatches)


@settings(CI, max_examples=40)
@given(module_programs())
def test_module_programs_train_alike_eager_and_compiled(program):
    problems = check_module_program(program)
    assert not problems, "\n".join(problems)


@settings(CI, max_examples=60)
@given(programs())
def test_generated_programs_are_shape_valid(program):
    """The generator tracks shapes: programs run eagerly (a few raise by design, e.g. autograd's
    in-place-on-a-view error), print as source that rebuilds them, and hit their declared outputs."""
    source = program.source()
    assert eval(source, {"Program": Program, "Input": Input, "Op": Op}).source() == source  # noqa: S307
    _, args = make_inputs(program, 0)
    try:
        outs = run_program(program, args)
    except RuntimeError as exc:
        assert "in-place" in str(exc) or "modified by an inplace" in str(exc)
        return
    assert len(outs) == len(program.outputs)


def test_harness_reports_a_wrong_compiled_result(monkeypatch):
    """The harness is not vacuous: a plan whose replay is off by one is caught, values and grads."""
    from kiln.jit.backends import interpret

    program = Program(dtype="float32", seed=1, stmts=[Input((3,), "float32", grad=True), Op("exp", (0,))],
                      outputs=(1,))
    assert not check_program(program).mismatches
    real_run = interpret.Plan.run

    def skewed(self, inputs, dims=None):
        outs, writes = real_run(self, inputs, dims)
        return [o + 1 for o in outs], writes

    monkeypatch.setattr(interpret.Plan, "run", skewed)
    problems = check_program(program, backends=["interpret"]).mismatches
    assert any("call 1 output 0: values differ" in p for p in problems), problems
    assert any("call 1 grad of input 0: values differ" in p for p in problems), problems


def test_harness_reports_outputs_that_alias_unlike_eager(monkeypatch):
    """Returning an argument, a view of it after an in-place update, and one tensor twice: a replay
    that hands back copies instead is caught by the alias comparison, not only by values."""
    from kiln.jit.output_alias import OutputAliases

    program = Program(dtype="float32", seed=2, stmts=[
        Input((3, 2), "float32"),
        Op("input_iadd", (0, 0)),
        Op("getitem", (1,), {"index": (("s", 0, 2, None),)}),
        Op("neg", (2,)),
    ], outputs=(3, 2, 0, 3), no_grad=True)
    assert not check_program(program, dynamic=False).mismatches
    monkeypatch.setattr(OutputAliases, "apply", lambda self, tensors, leaves, dims=None: list(tensors))
    problems = check_program(program, backends=["interpret"], dynamic=False).mismatches
    assert any("alias differently" in p for p in problems), problems


def test_cli_runs_a_short_campaign(capsys):
    from kiln.fuzz.__main__ import main

    code = main(["--minutes", "0.01", "--seed", "0", "--batch", "5"])
    out = capsys.readouterr().out
    assert "programs" in out and "mismatched" in out
    assert code == 0, out


_ = kiln
