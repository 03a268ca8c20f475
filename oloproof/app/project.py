"""A project on disk: ``oloproof.yaml``, ``release.yaml``, its cases and its system.

Everything here validates before anything runs: a bad file raises an
:class:`~oloproof.errors.InputError` (exit code 2) and nothing is written to the log.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oloproof.config.cases import CaseFile, SuiteInfo, check_fault_tools
from oloproof.config.locate import Locator
from oloproof.config.metamorphic import Suite, load_labels
from oloproof.config.models import (
    ProjectConfig,
    ReleaseConfig,
    load_project_config,
    load_release_config,
    validate_yaml,
)
from oloproof.errors import ConfigError, Interrupted, UsageError
from oloproof.evaluate.engine import SuiteEvaluation, build_suite
from oloproof.events import canonical_json
from oloproof.system import SystemFactory, SystemSlot, system_info

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

    @property
    def trials(self) -> int:
        return self.config.trials

    def set_trials(self, trials: int) -> None:
        """Run every case ``trials`` times (``--trials``, or a resumed run's own): the run
        stores it with its configuration, so ``eval`` and ``gate`` see it."""
        from oloproof.config.models import MAX_TRIALS

        if type(trials) is not int or not 1 <= trials <= MAX_TRIALS:
            raise UsageError(f"--trials {trials!r}: must be a whole number between 1 and {MAX_TRIALS}")
        self.config = self.config.model_copy(update={"trials": trials})
        self.stored_config["oloproof"] = _dump(self.config)

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
    stored = {"oloproof": _dump(config), "release": raw_release}
    return Project(root, config, locator, release, stored, suite)


def _dump(config: ProjectConfig) -> dict[str, Any]:
    """The configuration a run stores. ``trials`` only when above 1: a single-trial run stores
    exactly what it stored before trials existed (same events, same config digest)."""
    out = config.model_dump(mode="json", exclude_none=True)
    if out.get("trials") == 1:
        del out["trials"]
    return out


def stored_trials(stored: dict[str, Any]) -> int:
    """The trials per case of a run, from the configuration it stored (1 when absent)."""
    return int((stored.get("oloproof") or {}).get("trials", 1))


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


def _import(project: Project, spec: str, key: str, section: str = "system") -> Any:
    """The object ``module:attribute`` names, imported from the project folder. Anything the
    import does — raise, ``sys.exit()`` — is a located configuration error, never the
    command's own exit."""
    where = project.locator.where((section, key))
    module_name, _, attr = spec.partition(":")
    root = str(project.root)
    if root not in sys.path:
        sys.path.insert(0, root)
    from oloproof.recorder.record import contained_exit

    try:
        with contained_exit():  # os._exit at import: a configuration error, not the command's exit
            loaded = sys.modules.get(module_name)
            if loaded is not None and _inside(getattr(loaded, "__file__", None), project.root):
                # a long-lived process (a notebook, a test) loading the project again: fresh code
                module = importlib.reload(loaded)
            else:
                if loaded is not None:  # another project's module of the same name
                    del sys.modules[module_name]
                module = importlib.import_module(module_name)
    except BaseException as e:  # user code: anything can happen on import, SystemExit included
        if isinstance(e, Interrupted):  # the operator's Ctrl-C, not the module's doing
            raise
        raise ConfigError(f"{where}: {section}.{key} {spec!r}: cannot import module "
                          f"{module_name!r}: {type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{where}: {section}.{key} {spec!r}: module {module_name!r} "
                              f"has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


@dataclass
class LoadedSystem:
    """A project's system: the factory of its slots, and the first slot (made to prove that
    one can be made; an executor in this process uses it rather than make another)."""

    factory: SystemFactory
    slot: SystemSlot
    code_digest: str = ""

    @property
    def name(self) -> str:
        return self.factory.name

    @property
    def version(self) -> str:
        return self.factory.version


def load_system(project: Project) -> LoadedSystem:
    """Import ``system.callable`` (and ``system.factory``) from the project folder, check it
    against ``@system``, and make one slot to prove it can be made (errors exit 2)."""
    cfg = project.config.system
    obj = _import(project, cfg.callable, "callable")
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
    make = None
    if cfg.factory:
        make = _import(project, cfg.factory, "factory")
        if not callable(make):
            raise ConfigError(f"{project.locator.where(('system', 'factory'))}: system.factory "
                              f"{cfg.factory!r} is not callable")
    factory = SystemFactory(cfg.name, cfg.version, cfg.records, obj, cfg.callable, make, cfg.factory,
                            str(project.root))
    try:
        slot = factory.make_slot()
    except ConfigError as e:
        key = "factory" if cfg.factory else "callable"
        raise ConfigError(f"{project.locator.where(('system', key))}: {e}") from e
    import dataclasses

    factory = dataclasses.replace(factory, surface=system_surface(factory))
    slot.factory = factory
    return LoadedSystem(factory, slot, code_digest(project.root, obj))


#: folders never part of a project's own code
_NOT_CODE = {"__pycache__", "node_modules", "site-packages", "dist", "build"}
MAX_CODE_FILES = 2000


def code_digest(root: Path, target: Any) -> str:
    """SHA-256 over the system's module file and the project's own Python files (hidden
    folders, virtual environments and caches aside): replays are keyed by it, so changing
    the agent's code without changing its ``version`` still re-runs its replays."""
    files: set[Path] = set()
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    source = getattr(module, "__file__", None)
    if source:
        files.add(Path(source).resolve())
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _NOT_CODE
                             and not (Path(dirpath) / d / "pyvenv.cfg").exists())
        for name in sorted(filenames):
            if name.endswith(".py"):
                files.add((Path(dirpath) / name).resolve())
                count += 1
        if count > MAX_CODE_FILES:
            break
    h = hashlib.sha256()
    base = root.resolve()
    for path in sorted(files):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        try:
            name = str(path.relative_to(base))
        except ValueError:
            name = path.name
        h.update(name.encode() + b"\x00" + hashlib.sha256(data).digest())
    return h.hexdigest()


def declared_tools(factory: SystemFactory) -> set[str]:
    """Names of the ``@tool``-decorated functions a system declares: methods of its class,
    functions of the module it lives in and of the project's own modules loaded with it, and
    methods of the classes those modules hold (an adapter class beside the agent)."""
    return set(_tool_functions(factory))


def _tool_functions(factory: SystemFactory) -> dict[str, Any]:
    import inspect

    found: dict[str, Any] = {}
    target = factory.target
    places: list[Any] = []
    if isinstance(target, type):
        places.append(target)
    elif not inspect.isroutine(target):
        places.append(type(target))
    modules = [sys.modules.get(getattr(target, "__module__", "") or "")]
    if factory.root:
        root = Path(factory.root).resolve()
        modules.extend(m for m in list(sys.modules.values())
                       if _inside(getattr(m, "__file__", None), root))
    seen: set[int] = set()
    for module in modules:
        if module is None or id(module) in seen:
            continue
        seen.add(id(module))
        places.append(module)
        places.extend(v for _, v in inspect.getmembers(module, inspect.isclass))
    for place in places:
        for _, value in inspect.getmembers(place):
            info = getattr(value, "__oloproof_tool__", None)
            if isinstance(info, dict):
                found.setdefault(info["name"], value)
    return found


def tool_schema(fn: Any) -> str:
    """A tool's schema digest: its name, parameters (names, kinds, annotations, defaults) and
    description — what a model is shown of it. 16 hex digits of SHA-256."""
    import inspect

    info = getattr(fn, "__oloproof_tool__", {}) or {}
    try:
        signature = str(inspect.signature(fn))
    except (TypeError, ValueError):
        signature = "?"
    text = f"{info.get('name')}\x00{info.get('kind')}\x00{signature}\x00{inspect.getdoc(fn) or ''}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def system_surface(factory: SystemFactory) -> dict[str, Any]:
    """What the agent sees of its world (``RunStarted.surface``, SPEC §14): the schema digest
    of each of its tools, its ``instructions`` (a text attribute of the system object, if it
    has one) and ``external_data_version`` (likewise). A frozen prefix case compares them with
    the system it is run against: one that no longer matches is stale."""
    out: dict[str, Any] = {}
    tools = {name: tool_schema(fn) for name, fn in sorted(_tool_functions(factory).items())}
    if tools:
        out["tools"] = tools
    for attr, key in (("instructions", "instructions"), ("external_data_version", "external_data")):
        value = getattr(factory.target, attr, None)
        if isinstance(value, str) and value:
            out[key] = value
    return out


def check_case_faults(info: SuiteInfo, system: LoadedSystem) -> None:
    """A case's fault names a tool the system declares (when it declares any): a located
    case-file error with a did-you-mean otherwise (exit 2), before anything runs."""
    if info.fault_tools:
        check_fault_tools(info, declared_tools(system.factory))
