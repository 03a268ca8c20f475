"""Evaluators and projections over a case's events: pure, no I/O."""

from oloproof.evaluate.base import REGISTRY, Evaluator, EvaluatorConfig, evaluator, registry
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation, Summary, build_suite
from oloproof.evaluate.view import CaseView, fold_case

__all__ = ["REGISTRY", "CaseResult", "CaseView", "Evaluator", "EvaluatorConfig", "SuiteEvaluation",
           "Summary", "build_suite", "evaluator", "fold_case", "registry"]
