"""Evaluators, the aggregation of verdicts, slices and the gate: pure, no I/O."""

from oloproof.evaluate.base import (
           REGISTRY,
           Evaluator,
           EvaluatorConfig,
           evaluator,
           registry,
)
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation, Summary, build_suite

__all__ = ["REGISTRY", "CaseResult", "Evaluator", "EvaluatorConfig", "SuiteEvaluation",
           "Summary", "build_suite", "evaluator", "registry"]
