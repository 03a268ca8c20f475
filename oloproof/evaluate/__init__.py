"""Evaluators, the aggregation of verdicts, slices and the gate: pure, no I/O."""

from oloproof.evaluate.base import (
           REGISTRY,
           Evaluator,
           EvaluatorConfig,
           evaluator,
)
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation, Summary, build_suite
from oloproof.evaluate.registry import registry

__all__ = ["REGISTRY", "CaseResult", "Evaluator", "EvaluatorConfig", "SuiteEvaluation",
           "Summary", "build_suite", "evaluator", "registry"]
