"""Graph passes: the Compiler protocol of DESIGN.md. One pass per file."""
from .arith import ArithmeticElimination
from .base import FunctionPass, Looped, Pass, PassLog, Pipeline, Timed, logging_passes, run_pass
from .constant_fold import ConstantFold
from .cse import CSE
from .dce import DeadNodeElim
from .nograd import NoGradStrip
from .pipelines import GenericCompiler, inference_pipeline, training_pipeline
from .rewrite import Builder, Match, Pat, RewritePass, Rule, SubRewrite, sub_rule

__all__ = ["ArithmeticElimination", "Builder", "CSE", "ConstantFold", "DeadNodeElim", "FunctionPass",
           "GenericCompiler", "Looped", "Match", "NoGradStrip", "Pass", "PassLog", "Pat", "Pipeline",
           "RewritePass", "Rule", "SubRewrite", "Timed", "inference_pipeline", "logging_passes",
           "run_pass", "sub_rule", "training_pipeline"]
