"""Configuration and case files → validated models, with located error messages."""

from oloproof.config.cases import CaseFile, SuiteCase, SuiteInfo
from oloproof.config.locate import Locator, load_yaml
from oloproof.config.models import (
    MetricConfig,
    ProjectConfig,
    ReleaseConfig,
    Rule,
    SystemConfig,
    load_project_config,
    load_release_config,
)

__all__ = [
    "CaseFile",
    "Locator",
    "MetricConfig",
    "ProjectConfig",
    "ReleaseConfig",
    "Rule",
    "SuiteCase",
    "SuiteInfo",
    "SystemConfig",
    "load_project_config",
    "load_release_config",
    "load_yaml",
]
