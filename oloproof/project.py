"""A project on disk: ``oloproof.yaml``, ``release.yaml``, its cases and its system.

Everything here validates before anything runs: a bad file raises an
:class:`~oloproof.errors.InputError` (exit code 2) and nothing is written to the log.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from oloproof.config.cases import CaseFile, SuiteInfo
from oloproof.config.metamorphic import Suite, load_labels
from oloproof.config.locate import Locator
from oloproof.config.models import (
    ProjectConfig,
    ReleaseConfig,
    load_project_config,
    load_release_config,
    validate_yaml,
)
from oloproof.errors import ConfigError
from oloproof.evaluate.engine import SuiteEvaluation, build_suite
from oloproof.events import canonical_json
from oloproof.recorder.declare import Stateful, system_info

CONFIG_FILE = "oloproof.yaml"


@dataclass
class Project:
    root: Path
    config: ProjectConfig
    locator: Locator
    release: ReleaseConfig | None
    stored_config: dict[str, Any]
    suite: SuiteEvaluation

    @property
    def config_digest(self) -> str:
        return hashlib.sha256(canonical_json(self.stored_config)).hexdigest()

    @property
    def cases(self) -> CaseFile:
        return CaseFile(self.root / self.config.cases)

    @property
    def cases_label(self) -> str:
        return self.config.cases

    @property
    def suite_cases(self) -> Suite:
        """The source cases and the cases metamorphic transforms derive from them."""
        return Suite(self.cases, self.config.metamorphic)

    def prepare(self) -> SuiteInfo:
        """Validate every case, derived case and validity label before anything runs."""
        info = self.suite_cases.validate()
        labels = load_labels(self.root, self.config.metamorphic, info.ids, self.locator)
        self.suite.set_metamorphic(self.config.metamorphic.transforms if self.config.metamorphic else [], labels)
        if labels:
            self.stored_config["labels"] = labels
        return info


def load_project(root: Path | str = ".", config_file: str = CONFIG_FILE) -> Project:
    root = Path(root).resolve()
    path = root / config_file
    if not path.exists():
        raise ConfigError(
            f"{path}: no {config_file} here; run 'oloproof init --example support-agent DIR' "
            "to start from an example, or cd into your project"
        )
    config, raw, locator = load_project_config(path)
    release = release_locator = raw_release = None
    if config.release:
        release_path = root / config.release
        release, release_locator = load_release_config(release_path)
        raw_release = release.model_dump(exclude_none=True)
    suite = build_suite(config, locator, release, release_locator)
    stored = {"oloproof": config.model_dump(mode="json", exclude_none=True), "release": raw_release}
    return Project(root, config, locator, release, stored, suite)


def suite_from_stored(stored: dict[str, Any], label: str = "<stored run config>") -> SuiteEvaluation:
    """Rebuild a run's evaluation from the config stored in its ``run_started`` event."""
    loc = Locator(label)
    config = validate_yaml(ProjectConfig, stored["oloproof"], loc)
    release = validate_yaml(ReleaseConfig, stored["release"], loc) if stored.get("release") else None
    suite = build_suite(config, loc, release, loc)
    if config.metamorphic:
        suite.set_metamorphic(config.metamorphic.transforms, stored.get("labels") or {})
    return suite


def _inside(file: str | None, root: Path) -> bool:
    if not file:
        return False
    try:
        Path(file).resolve().relative_to(root)
        return True
    except ValueError:
        return False


@dataclass
class LoadedSystem:
    name: str
    version: str
    records: tuple[str, ...]
    call: Callable[[Any], Any]
    instance: Any  # the Stateful object owning the sandbox, if any
    target: Any = None  # what system.callable named (a class is instantiated once)

    @property
    def stateful(self) -> bool:
        return self.instance is not None and isinstance(self.instance, Stateful)


def load_system(project: Project) -> LoadedSystem:
    """Import ``system.callable`` from the project folder and check it against ``@system``."""
    cfg = project.config.system
    where = project.locator.where(("system", "callable"))
    module_name, _, attr = cfg.callable.partition(":")
    root = str(project.root)
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        loaded = sys.modules.get(module_name)
        if loaded is not None and _inside(getattr(loaded, "__file__", None), project.root):
            # a long-lived process (a notebook, a test) loading the project again: fresh code
            module = importlib.reload(loaded)
        else:
            if loaded is not None:  # another project's module of the same name
                del sys.modules[module_name]
            module = importlib.import_module(module_name)
    except Exception as e:  # user code: anything can happen on import
        raise ConfigError(f"{where}: system.callable {cfg.callable!r}: cannot import module "
                          f"{module_name!r}: {type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{where}: system.callable {cfg.callable!r}: module {module_name!r} "
                              f"has no attribute {attr!r}")
        obj = getattr(obj, part)
    info = system_info(obj)
    if info is not None:
        for field, declared in (("name", info.name), ("version", info.version),
                                ("records", tuple(sorted(info.records)))):
            configured = getattr(cfg, field)
            if field == "records":
                configured = tuple(sorted(configured))
            if declared != configured:
                raise ConfigError(
                    f"{project.locator.where(('system', field))}: system.{field} is {configured!r} in "
                    f"oloproof.yaml but @system declares {declared!r} on {cfg.callable}; make them agree"
                )
    target = obj
    if isinstance(obj, type):
        try:
            target = obj()
        except Exception as e:
            raise ConfigError(f"{where}: cannot instantiate {cfg.callable}: {type(e).__name__}: {e}") from e
    if callable(target):
        call = target
    elif callable(getattr(target, "run", None)):
        call = target.run
    else:
        raise ConfigError(f"{where}: system.callable {cfg.callable!r} is neither callable nor has a "
                          "run(case) method")
    instance = target if isinstance(target, Stateful) else None
    return LoadedSystem(cfg.name, cfg.version, cfg.records, call, instance, target)


def declared_tools(system: LoadedSystem) -> set[str]:
    """Names of the ``@tool``-decorated functions a system declares: methods of its class, or
    functions of the module it lives in."""
    import inspect

    names: set[str] = set()
    owner = system.target
    places = [type(owner)] if owner is not None and not inspect.isfunction(owner) else []
    module = sys.modules.get(getattr(system.call, "__module__", "") or "")
    if module is not None:
        places.append(module)
    for place in places:
        for _, value in inspect.getmembers(place):
            info = getattr(value, "__oloproof_tool__", None)
            if isinstance(info, dict):
                names.add(info["name"])
    return names
