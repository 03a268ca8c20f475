"""A project on disk: ``oloproof.yaml``, ``release.yaml``, its cases and its system.

Everything here validates before anything runs: a bad file raises an
:class:`~oloproof.errors.InputError` (exit code 2) and nothing is written to the log.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from oloproof.config.cases import CaseFile, SuiteInfo
from oloproof.config.files import read_regular
from oloproof.config.locate import Locator
from oloproof.config.metamorphic import Suite, load_labels
from oloproof.config.models import (
    ProjectConfig,
    ReleaseConfig,
    load_project_config,
    load_release_config,
    validate_yaml,
)
from oloproof.errors import CaseFileError, ConfigError, InputError, Interrupted, UsageError
from oloproof.evaluate.engine import SuiteEvaluation, build_suite
from oloproof.events import canonical_json
from oloproof.system import SystemFactory, SystemSlot, system_info

CONFIG_FILE = "oloproof.yaml"


@dataclass
class Project:
    """A validated project: its folder, ``oloproof.yaml`` (with the locator its errors are
    placed with), ``release.yaml``, the configuration a run stores, and the suite built from
    them. Made by :func:`load_project`."""

    root: Path
    config: ProjectConfig
    locator: Locator
    release: ReleaseConfig | None
    stored_config: dict[str, Any]
    suite: SuiteEvaluation
    #: where ``suite``'s evaluators sit in oloproof.yaml (a prefix suite's: ``prefix.evaluators``)
    evaluators_path: ClassVar[tuple[str, ...]] = ("evaluators",)
    #: a partial run's choice of cases (``RunStarted.selection``); None: the whole suite
    selection: dict[str, Any] | None = None
    #: a project whose cases are its prefix cases (``oloproof prefix run``)
    is_prefix = False

    def __post_init__(self) -> None:
        # the suite's python checks are imported as the project is made, whatever made it
        # (load_project, a prefix project): before anything runs, errors located
        bind_checks(self)
        bind_judges(self)
        self.suite.definition = self.stored_config  # the same dict: what prepare() adds is in it

    @property
    def config_digest(self) -> str:
        """SHA-256 of the canonical JSON of the stored configuration (as ``RunStarted`` holds it)."""
        return hashlib.sha256(canonical_json(self.stored_config)).hexdigest()

    @property
    def cases(self) -> CaseFile:
        """The source cases file that ``cases:`` names, relative to the project folder."""
        return CaseFile(self.root / self.config.cases)

    @property
    def cases_label(self) -> str:
        """The cases path as ``oloproof.yaml`` writes it (what a run records as ``cases_path``)."""
        return self.config.cases

    @property
    def suite_cases(self) -> Suite:
        """The source cases and the cases metamorphic transforms derive from them (of a partial
        run: those it chose, with their derived cases)."""
        keep = frozenset(self.selection["ids"]) if self.selection else None
        return Suite(self.cases, self.config.metamorphic, keep)

    def case_count(self, info: SuiteInfo) -> int:
        """The cases a run of the project records once each (before trials)."""
        if not self.selection:
            return info.count
        transforms = len(self.config.metamorphic.transforms) if self.config.metamorphic else 0
        return len(self.selection["ids"]) * (1 + transforms)

    @property
    def trials(self) -> int:
        """How many times each case runs (``trials:``, or ``--trials`` via :meth:`set_trials`)."""
        return self.config.trials

    def set_trials(self, trials: int) -> None:
        """Run every case ``trials`` times (``--trials``, or a resumed run's own): the run
        stores it with its configuration, so ``eval`` and ``gate`` see it."""
        from oloproof.config.models import MAX_TRIALS

        if type(trials) is not int or not 1 <= trials <= MAX_TRIALS:
            raise UsageError(f"--trials {trials!r}: must be a whole number between 1 and {MAX_TRIALS}")
        self.config = self.config.model_copy(update={"trials": trials})
        self.stored_config["oloproof"] = _dump(self.config)

    def prepare(self, *, selectors: bool = True) -> SuiteInfo:
        """Validate every case, derived case and validity label before anything runs, and (with
        ``selectors``) every case id and tag a ``when:`` names against the cases — not when a
        stored run is re-judged (``eval``): its cases are the log's, not the file's."""
        info = self.suite_cases.validate()
        labels = load_labels(self.root, self.config.metamorphic, info.ids, self.locator)
        self.suite.set_metamorphic(self.config.metamorphic.transforms if self.config.metamorphic else [], labels)
        if labels:
            self.stored_config["labels"] = labels
        self._judge_labels(info)
        if selectors:
            self._check_selectors()
        return info

    def prepare_rejudging(self) -> None:
        """What re-judging a stored run (``eval``) takes from the project as it is now: the
        metamorphic transforms and their validity labels, the model judges' labels. The
        cases are the run's, so the case file is read only where those labels are checked
        against its ids (:meth:`prepare`); without transforms or model judges it is not read."""
        from oloproof.evaluate.judge import ModelJudge

        if self.config.metamorphic is not None or any(isinstance(ev, ModelJudge) for ev in self.suite.evaluators):
            self.prepare(selectors=False)
            return
        self.suite.set_metamorphic([], {})

    def _check_selectors(self) -> None:
        """Every case id and tag a ``when:`` names is one of the suite's (a source case, a case
        derived from it; a tag some case carries): a misspelt one would leave its cases out of
        the criterion in silence, and the criterion would pass on the others. A located
        :class:`ConfigError` with a did-you-mean otherwise."""
        entries: Any = self.config
        for part in self.evaluators_path:
            entries = getattr(entries, part, None) or []
        named = [(k, key, j, value) for k, entry in enumerate(entries)
                 for key in ("ids", "tags") if isinstance(entry, dict) and isinstance(entry.get("when"), dict)
                 for j, value in enumerate(entry["when"].get(key) or ())]
        if not named:
            return
        from oloproof.config.locate import did_you_mean

        ids: set[str] = set()
        tags: set[str] = set()
        transforms = [t.name for t in self.config.metamorphic.transforms] if self.config.metamorphic else []
        for case in self.cases:
            ids.add(case.id)
            ids.update(f"{case.id}~{t}" for t in transforms)
            tags.update(case.tags)
        for k, key, j, value in named:
            known = ids if key == "ids" else tags
            if value in known:  # (a trial, c/2, is selected by its case's id: c)
                continue
            what = "case" if key == "ids" else "case carries the tag"
            field = f"{'.'.join(self.evaluators_path)}[{k}].when.{key}[{j}]"
            raise ConfigError(f"{self.locator.where((*self.evaluators_path, k, 'when', key, j))}: {field}: no "
                              f"{what} {value!r} in {self.cases_label}{did_you_mean(value, known)} (the evaluator "
                              "would judge no case by it)")

    def _judge_labels(self, info: SuiteInfo) -> None:
        """People's labels of the model judges' criteria (``calibration:``), validated against
        the suite's case ids and stored with the run's configuration: a stored run's gate is
        decided with the labels it ran with; ``oloproof eval`` reads them as they are now."""
        from oloproof.config.judge_labels import load_judge_labels
        from oloproof.evaluate.judge import ModelJudge

        base = tuple(self.evaluators_path)
        judges = [(ev.criterion, ev.config.calibration, self.locator.where(base + (i, "calibration")))
                  for i, ev in enumerate(self.suite.evaluators)
                  if isinstance(ev, ModelJudge) and ev.config.calibration is not None]
        if not judges and not any(isinstance(ev, ModelJudge) for ev in self.suite.evaluators):
            return
        # a suite without transforms keeps no ids: the source cases' own, read again
        ids = info.ids or frozenset(c.id for c in self.cases) if judges else info.ids
        labels = load_judge_labels(self.root, judges, ids)
        self.suite.set_judge_labels(labels)
        if labels:
            self.stored_config["judge_labels"] = {c: {k: list(v) for k, v in ls.items()} for c, ls in labels.items()}


def load_project(root: Path | str = ".", config_file: str = CONFIG_FILE) -> Project:
    """Load and validate the project in ``root``: ``config_file``, the ``release.yaml`` it
    names, and the suite of evaluators, metrics and slices built from them (cases are
    validated later, by :meth:`Project.prepare`).

    Raises:
        ConfigError: no ``config_file`` in ``root`` (the message says how to start one).
        InputError: a configuration that does not validate (located: file, line, field).
    """
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


def suite_from_stored(stored: dict[str, Any], label: str = "<stored run config>",
                      root: Path | str | None = None, *, trusted: bool = False) -> SuiteEvaluation:
    """Rebuild a run's evaluation from the config stored in its ``run_started`` event.

    Its python checks are imported from ``root`` (None: :func:`project_folder`), see
    :func:`bind_stored_checks`; ``trusted`` for a configuration this process was handed by the
    run's own driver (a worker), not read from a log."""
    loc = Locator(label)
    config = validate_yaml(ProjectConfig, stored["oloproof"], loc)
    release = validate_yaml(ReleaseConfig, stored["release"], loc) if stored.get("release") else None
    suite = build_suite(config, loc, release, loc)
    if config.metamorphic:
        suite.set_metamorphic(config.metamorphic.transforms, stored.get("labels") or {})
    bind_stored_checks(suite, root, trusted=trusted, timeout=config.timeout)
    bind_stored_judges(suite, stored)
    suite.definition = stored
    return suite


# ---- python checks (``type: python``): user code, imported here, judged in evaluate/ ---------

def bind_checks(project: Project) -> None:
    """Import the function of every ``type: python`` check of ``project``'s suite from the
    project folder, as ``system.callable`` is imported — a module or attribute that is not
    there, an import that raises, or an object that cannot be a check (not callable, ``async``,
    not taking one argument) is a located :class:`ConfigError` (exit 2, before anything runs) —
    and store the digest of each one's code with the run's configuration (``checks``:
    ``module:function`` -> :func:`check_digest`): a changed check changes the configuration's
    digest, so a run's evaluations are never those of another version of its checks."""
    from oloproof.config.locate import dotted
    from oloproof.evaluate.python import PythonCheck, function_problem

    digests: dict[str, str] = {}
    base = tuple(project.evaluators_path)
    for i, ev in enumerate(project.suite.evaluators):
        if not isinstance(ev, PythonCheck):
            continue
        path = base + (i, "function")
        where, label = project.locator.where(path), dotted(path)
        with contextlib.redirect_stdout(sys.stderr):  # a module that prints as it is imported
            fn = _import_object(project.root, ev.spec, label, where, fresh=not digests)
        problem = function_problem(fn)
        if problem is not None:
            raise ConfigError(f"{where}: {label} {ev.spec!r} {problem}")
        ev.bind(_user_check(fn, project.config.timeout), check_digest(fn, ev.spec), str(project.root))
        digests[ev.spec] = ev.digest
    if digests:
        project.stored_config["checks"] = digests


def bind_stored_checks(suite: SuiteEvaluation, root: Path | str | None, *, trusted: bool = False,
                       timeout: float | None = None) -> None:
    """Import the python checks of a suite rebuilt from a stored run's configuration.

    A log names the code; only code of the project folder is imported for it (``root``, or
    :func:`project_folder`): a module that is not a file or package of that folder, or that
    cannot be imported any more, leaves its check unbound — every case it judges is
    ``missing`` (``evaluator_error``) with the reason, and the commands that re-judge the run
    say so (:func:`oloproof.evaluate.python.changes`). A ``trusted`` configuration (one a
    worker got from its driver) imports as ``oloproof.yaml`` does, from anywhere on the path."""
    from oloproof.evaluate.python import PythonCheck, function_problem

    checks = [ev for ev in suite.evaluators if isinstance(ev, PythonCheck)]
    if not checks:
        return
    folder = Path(root).resolve() if root is not None else Path.cwd() if trusted else project_folder()
    fresh = not trusted
    for ev in checks:
        try:
            if folder is None:
                raise ConfigError(f"no project folder to import it from (no {CONFIG_FILE} in {Path.cwd()} or a "
                                  "folder above it); run the command in the project's folder")
            module_name = ev.spec.partition(":")[0]
            if not trusted and not _module_in(folder, module_name):
                raise ConfigError(f"no module {module_name!r} in the project folder {folder} (a stored run's "
                                  "python checks are imported from there only)")
            with contextlib.redirect_stdout(sys.stderr):
                fn = _import_object(folder, ev.spec, "", "", fresh=fresh)
            fresh = False
            if not trusted and not _module_in(folder, module_name, imported=True):
                raise ConfigError(f"module {module_name!r} was imported from outside the project folder {folder}")
            problem = function_problem(fn)
            if problem is not None:
                raise ConfigError(f"{ev.spec!r} {problem}")
            ev.bind(_user_check(fn, timeout), check_digest(fn, ev.spec), str(folder))
        except ConfigError as e:
            ev.unbound(str(e))


#: seconds a python check may take on one case when ``oloproof.yaml`` sets no ``timeout``
CHECK_TIMEOUT = 60.0


def _user_check(fn: Any, timeout: float | None) -> Any:
    """A python check as it is judged with: its ``print`` goes to stderr (a command's standard
    output carries its result — ``--json -``, ``export --out -``, the gate's comment — never a
    check's own lines), and it may take at most the configuration's ``timeout`` (else
    :data:`CHECK_TIMEOUT`) seconds on one case: a check that loops or waits forever would hang
    the run, ``eval`` and ``gate``. Past it the check is interrupted where it is (on the main
    thread; elsewhere it is left behind) and the case is ``missing`` (``evaluator_error``) with
    a :class:`TimeoutError` whose traceback shows where the check was."""
    import functools

    from oloproof.recorder.record import CaseTimeout, call_with_timeout

    seconds = CHECK_TIMEOUT if timeout is None else timeout
    source = "the timeout in oloproof.yaml" if timeout is not None else \
        "the limit when oloproof.yaml sets no timeout"

    def printing(case: Any) -> Any:
        with contextlib.redirect_stdout(sys.stderr):
            return fn(case)

    @functools.wraps(fn)
    def check(case: Any) -> Any:
        try:
            return call_with_timeout(lambda: printing(case), seconds)
        except CaseTimeout as e:
            raise TimeoutError(f"the check did not return within {seconds:g} s ({source})") \
                .with_traceback(e.__traceback__) from None

    return check


# ---- model judges (``type: model_judge``): a Python judge is user code, imported here ---------

def judge_problem(fn: Any) -> str | None:
    """Why ``fn`` cannot be a Python judge, or None: it must be a synchronous callable taking
    ``(prompt, *, case)``."""
    import inspect

    if not callable(fn):
        return f"is not callable (it is {type(fn).__name__})"
    call = None if inspect.isroutine(fn) or isinstance(fn, type) else type(fn).__call__
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call):
        return "is an async function; a judge is a plain function: def judge(prompt, *, case) -> dict"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind("", case=None)
    except TypeError:
        return f"must take (prompt, *, case) (its signature is {signature})"
    return None


def bind_judges(project: Project) -> None:
    """Import every Python judge (``judge: module:function``) of ``project``'s model judges as
    python checks are imported (a located :class:`ConfigError`, exit 2, for one that is not
    there, raises on import or cannot be a judge), and store the digest of each one's code with
    the run's configuration (``judges``: ``module:function`` -> digest): a judge whose code
    changed is another judge (its ``model`` is ``code:<digest>``), never answered from the cache
    of the old one."""
    from oloproof.config.locate import dotted
    from oloproof.evaluate.judge import ModelJudge

    digests: dict[str, str] = {}
    base = tuple(project.evaluators_path)
    for i, ev in enumerate(project.suite.evaluators):
        if not isinstance(ev, ModelJudge) or ev.provider is not None:
            continue
        path = base + (i, "judge")
        where, label = project.locator.where(path), dotted(path)
        fn = _import_object(project.root, ev.judge_id, label, where, fresh=not digests)
        problem = judge_problem(fn)
        if problem is not None:
            raise ConfigError(f"{where}: {label} {ev.judge_id!r} {problem}")
        ev.bind(fn, check_digest(fn, ev.judge_id))
        digests[ev.judge_id] = ev.digest
    if digests:
        project.stored_config["judges"] = digests


def bind_stored_judges(suite: SuiteEvaluation, stored: dict[str, Any]) -> None:
    """A stored run's model judges, as it ran: the code digest of each Python judge (which
    judgements it reads) and the labels it was calibrated with. Nothing is imported: a stored
    run is never judged again, only read."""
    if not suite.judges:
        return
    digests = stored.get("judges") or {}
    for _, ev in suite.judges:
        if ev.provider is None:
            ev.bind(None, str(digests.get(ev.judge_id, "")))
    labels = stored.get("judge_labels") or {}
    suite.set_judge_labels({c: {k: (v[0], v[1]) for k, v in ls.items()} for c, ls in labels.items()})


def project_folder(start: Path | None = None) -> Path | None:
    """The project folder a read command works in: the nearest folder from ``start`` (the
    current one) upward holding ``oloproof.yaml`` — as the log is found — or None."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    return None


def _module_in(folder: Path, module_name: str, imported: bool = False) -> bool:
    """Whether the top-level module or package of ``module_name`` is one of ``folder``'s own
    (found there, without importing it; with ``imported``: as this process imported it)."""
    top = module_name.partition(".")[0]
    if imported:
        module = sys.modules.get(top)
        places = [getattr(module, "__file__", None), *list(getattr(module, "__path__", None) or [])]
        return any(isinstance(p, str) and _inside(p, folder) for p in places)
    from importlib.machinery import PathFinder

    return PathFinder.find_spec(top, [str(folder)]) is not None


def check_digest(fn: Any, spec: str) -> str:
    """SHA-256 of a check's code: the bytes of the module ``spec`` names and of the file that
    defines the function, if another (location aside: the same code has the same digest in
    any folder). Helpers it imports from other modules are not part of it."""
    files: list[str] = []
    module = sys.modules.get(spec.partition(":")[0])
    for file in (getattr(module, "__file__", None), _source_file(fn)):
        if isinstance(file, str) and os.path.realpath(file) not in files:
            files.append(os.path.realpath(file))
    h = hashlib.sha256(spec.encode())
    for file in files:
        try:
            h.update(b"\x00" + hashlib.sha256(read_regular(Path(file), file, ConfigError)).digest())
        except (OSError, ConfigError):
            h.update(b"\x00unreadable")
    return h.hexdigest()


def _source_file(fn: Any) -> str | None:
    import inspect

    try:
        return inspect.getsourcefile(fn)
    except TypeError:  # a builtin, or an object whose class has no source
        return None


#: a package a project may import that an Oloproof extra (or a framework) provides -> how to
#: install it: named when the import fails
MISSING_EXTRAS = {
    "opentelemetry": "pip install 'oloproof[otel]'",
    "pydantic_ai": "pip install 'oloproof[otel]' pydantic-ai-slim",
    "agents": "pip install 'oloproof[openai-agents]'",
    "dask": "pip install 'oloproof[dask]'",
    "distributed": "pip install 'oloproof[dask]'",
    "langgraph": "pip install 'oloproof[langgraph]'",
    "langchain_core": "pip install 'oloproof[langgraph]'",
    "openinference": "pip install openinference-instrumentation-langchain",
}


def _forget_project_modules(root: Path) -> None:
    """A long-lived process (a notebook, a test session) loading a project again gets fresh
    code: the modules it imported from this folder are forgotten, and so is any module named
    like one of the folder's own (``tools``, ``app``) that another project's folder provided —
    or the system would silently run that other project's helper."""
    import sysconfig

    own = {p.stem for p in root.glob("*.py")} | {p.name for p in root.iterdir()
                                                 if p.is_dir() and (p / "__init__.py").exists()}
    installed = tuple(str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("stdlib", "purelib", "platlib"))
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        if _inside(file, root):
            del sys.modules[name]
        elif name.partition(".")[0] in own and not _resolved(file).startswith(installed):
            del sys.modules[name]  # another project's module of the same name


@functools.lru_cache(maxsize=65536)
def _resolved(file: str) -> str:
    """``file`` with its symbolic links resolved, remembered: the modules of a process (a few
    thousand once a framework is imported) are looked up on every project load, and resolving
    each path again (an ``lstat`` per component) cost most of a small run's time."""
    return os.path.realpath(file)


def _inside(file: str | None, root: Path) -> bool:
    if not file:
        return False
    path, top = _resolved(file), _resolved(str(root))
    return path == top or path.startswith(top if top.endswith(os.sep) else top + os.sep)


def _import(project: Project, spec: str, key: str, section: str = "system") -> Any:
    """The object ``module:attribute`` names, imported from the project folder. Anything the
    import does — raise, ``sys.exit()`` — is a located configuration error, never the
    command's own exit."""
    return _import_object(project.root, spec, f"{section}.{key}", project.locator.where((section, key)))


def _import_object(root: Path, spec: str, label: str, where: str, fresh: bool = True) -> Any:
    """:func:`_import` from folder ``root``; errors name ``where`` and ``label`` (the field)
    when given. ``fresh``: forget the folder's modules first (a long-lived process gets the
    code as it is now)."""
    head = f"{where}: {label} {spec!r}: " if where else ""
    module_name, _, attr = spec.partition(":")
    folder = str(root)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    from oloproof.recorder.record import contained_exit

    try:
        with contained_exit():  # os._exit at import: a configuration error, not the command's exit
            if fresh:
                _forget_project_modules(root)
            module = importlib.import_module(module_name)
    except BaseException as e:  # user code: anything can happen on import, SystemExit included
        if isinstance(e, Interrupted):  # the operator's Ctrl-C, not the module's doing
            raise
        hint = ""
        if isinstance(e, ModuleNotFoundError) and e.name:
            extra = MISSING_EXTRAS.get(e.name.partition(".")[0])
            hint = f"; install it with: {extra}" if extra else ""
        raise ConfigError(f"{head}cannot import module {module_name!r}: {type(e).__name__}: {e}{hint}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            from oloproof.config.locate import did_you_mean

            names = [n for n in dir(obj) if not n.startswith("_")]
            raise ConfigError(f"{head}module {module_name!r} has no attribute {attr!r}{did_you_mean(part, names)}")
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
        """The system's name, as the factory (``system.name`` / ``@system``) gives it."""
        return self.factory.name

    @property
    def version(self) -> str:
        """The system's version, as the factory gives it."""
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
        try:  # a FIFO or a device named *.py is no code: skipped, never read (it would hang)
            data = read_regular(path, str(path), ConfigError)
        except (OSError, ConfigError):
            continue
        try:
            name = str(path.relative_to(base))
        except ValueError:
            name = path.name
        h.update(name.encode() + b"\x00" + hashlib.sha256(data).digest())
    return h.hexdigest()


#: files a run's map of what its system could read holds (``RunStarted.files``); past it, the
#: rest of the project folder goes unchecked
MAX_INPUT_FILES = MAX_CODE_FILES
#: a larger file is known by its size and modification time rather than read whole: a run
#: start reads at most MAX_INPUT_FILES * MAX_HASHED_BYTES, whatever the project folder holds
MAX_HASHED_BYTES = 8 * 2**20
_DIGEST_HEX = 16  # of a file's SHA-256: enough to tell a change, small enough for 2,000 files


def input_files(project: Project, target: Any = None, outputs: Iterable[str | Path] = ()) -> dict[str, str]:
    """What the system could read, path -> digest (``RunStarted.files``): every regular file
    of the project folder, the modules it imported from ``PYTHONPATH`` (outside the project,
    site-packages and the standard library) and the files ``system.code`` names. Hidden files
    and folders (``.oloproof/`` among them), caches, virtual environments, the run's
    ``outputs`` (its log, its ``--json``) and the files the configuration names (checked on
    their own) are left out. Paths relative to the project folder, absolute outside it; at
    most :data:`MAX_INPUT_FILES` of them.

    Data files are not part of :func:`code_digest`, the replay key: a replay follows the case
    recorded in the same run, so a data change that alters what the agent does alters that
    recording (and a control replay that no longer reproduces it is not trusted), while every
    edit of a note or a README would otherwise throw the cache away."""
    walked, modules = _inputs(project, target, outputs)
    files = {**modules, **walked}
    return {key: _file_digest(path) for key, path in sorted(files.items())}


def changed_inputs(stored: dict[str, str], project: Project, target: Any = None,
                   outputs: Iterable[str | Path] = ()) -> list[str]:
    """The files of a run's stored map (``RunStarted.files``) that changed, went away, or —
    in the folders walked — appeared since; each named with what happened to it. A stored
    module this process has not imported (yet) is read from its path."""
    walked, modules = _inputs(project, target, outputs)
    now = {**modules, **walked}
    out = []
    root = project.root.resolve()
    for key, digest in stored.items():
        # a file the run saw that this command writes (`--resume ID --json results.json` after a
        # run without --json) is left out of `now`, not gone: compare it as it is
        path = now.get(key) or (Path(key) if Path(key).is_absolute() else root / key)
        if not path.exists():
            out.append(f"{key} (removed)")
        elif _file_digest(path) != digest:
            out.append(key)
    if len(stored) < MAX_INPUT_FILES:  # the stored map holds every file of the walked folders
        # a new module is new code; other new files are most often what the system wrote
        # itself while it ran (a report, a log), and cannot have changed the cases recorded
        out.extend(f"{key} (new)" for key in walked if key not in stored and key.endswith(".py"))
    return out


def _inputs(project: Project, target: Any, outputs: Iterable[str | Path]) -> tuple[dict[str, Path], dict[str, Path]]:
    """(the files of the folders walked — the project's, ``system.code``'s —, the modules
    imported from outside them), each key -> path."""
    root = project.root.resolve()
    config = project.config
    named = [CONFIG_FILE, config.release, config.cases]
    if config.metamorphic:
        named.extend(t.validity_labels for t in config.metamorphic.transforms)
    if config.prefix:
        named.extend((config.prefix.cases, config.prefix.release))
    skip = {(root / n).resolve() for n in named if n}
    written = [Path(o).resolve() for o in outputs if o and str(o) != "-"]

    def kept(path: Path) -> bool:
        if path in skip or any(p in skip for p in path.parents):
            return False
        # a log's -wal/-shm/-journal and a --json file's temporary twin are outputs too
        return not any(path.parent == w.parent
                       and (path.name == w.name or path.name.startswith((w.name + "-", w.name + ".")))
                       for w in written)

    walked: dict[str, Path] = {}
    places = [root]
    for k, entry in enumerate(config.system.code or ()):
        place = Path(entry) if Path(entry).is_absolute() else root / entry
        if not place.exists():
            raise ConfigError(f"{project.locator.where(('system', 'code', k))}: system.code {entry!r}: "
                              f"no such file or folder ({place})")
        places.append(place.resolve())
    for place in places:
        for path in ([place] if place.is_file() else _regular_files(place)):
            if len(walked) >= MAX_INPUT_FILES:
                break
            if kept(path):
                walked.setdefault(_input_key(path, root), path)
    modules: dict[str, Path] = {}
    for path in _path_modules(root, target):
        if len(walked) + len(modules) >= MAX_INPUT_FILES:
            break
        modules.setdefault(_input_key(path, root), path)
    return walked, modules


def _input_key(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _regular_files(folder: Path) -> Iterator[Path]:
    """The regular files under ``folder``, sorted: hidden ones, caches and virtual
    environments aside (as :func:`code_digest` walks), symbolic links to folders not followed."""
    import stat

    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _NOT_CODE
                             and not (Path(dirpath) / d / "pyvenv.cfg").exists())
        for name in sorted(filenames):
            if name.startswith(".") or name.endswith((".pyc", ".pyo")):
                continue
            path = Path(dirpath) / name
            try:
                if stat.S_ISREG(path.stat().st_mode):
                    yield path.resolve()
            except OSError:  # a dangling link: nothing to read
                continue


def _path_modules(root: Path, target: Any) -> Iterator[Path]:
    """The files of the modules imported from a ``PYTHONPATH`` entry outside ``root`` (the
    standard library, site-packages and Oloproof itself aside), and the system's own module."""
    import sysconfig

    entries = [Path(e).resolve() for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    installed = {Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
                 if (p := sysconfig.get_paths().get(key))}
    own = sys.modules.get(getattr(target, "__module__", "") or "")
    for name, module in sorted(list(sys.modules.items()), key=lambda item: item[0]):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not file or name == "oloproof" or name.startswith("oloproof."):
            continue
        path = Path(_resolved(file))
        if path.is_relative_to(root) or not path.is_file():
            continue
        if module is not own and (not any(path.is_relative_to(e) for e in entries)
                                  or {"site-packages", "dist-packages"} & set(path.parts)
                                  or any(path.is_relative_to(i) for i in installed)):
            continue
        yield path


def _file_digest(path: Path) -> str:
    """16 hex digits of the SHA-256 of the file (of its size and modification time past
    :data:`MAX_HASHED_BYTES`); ``unreadable`` when it cannot be read, ``not a file`` when it
    is no longer a regular file (a FIFO is never read: it would hang)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return "unreadable"
    with open(fd, "rb") as fh:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return "not a file"
            h = hashlib.sha256()
            if info.st_size > MAX_HASHED_BYTES:
                h.update(f"size:{info.st_size}:mtime:{info.st_mtime_ns}".encode())
            else:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError:
            return "unreadable"
    return h.hexdigest()[:_DIGEST_HEX]


def declared_tools(factory: SystemFactory) -> set[str]:
    """Names of the ``@tool``-decorated functions a system declares: methods of its class,
    functions of the module it lives in and of the project's own modules loaded with it, and
    methods of the classes those modules hold (an adapter class beside the agent)."""
    return set(_tool_functions(factory))


def model_calls(factory: SystemFactory) -> set[str]:
    """Names of the model calls a system declares (``@tool(kind="model")``, the models an
    integration routes): never faulted."""
    return {name for name, fn in _tool_functions(factory).items()
            if (getattr(fn, "__oloproof_tool__", None) or {}).get("kind") == "model"}


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
        for key, value in inspect.getmembers(place):
            info = getattr(value, "__oloproof_tool__", None)
            if isinstance(info, dict):
                found.setdefault(info["name"], value)
            # what oloproof.integrations.declare marked: the tools and model calls routed through
            # the recorder by an object a framework integration instrumented (a member of the
            # module), or by the class itself
            routed = value if key == "__oloproof_tools__" else \
                None if isinstance(value, type) else getattr(value, "__oloproof_tools__", None)
            if isinstance(routed, dict):
                for name, fn in routed.items():
                    if isinstance(getattr(fn, "__oloproof_tool__", None), dict):
                        found.setdefault(name, fn)
    return found


def tool_schema(fn: Any) -> str:
    """A tool's schema digest: its name, parameters (names, kinds, annotations, defaults) and
    description — what a model is shown of it. 16 hex digits of SHA-256."""
    import inspect

    info = getattr(fn, "__oloproof_tool__", {}) or {}
    if "schema" in info:  # a framework's tool: the JSON schema the framework shows the model
        from oloproof.events import canonical_json

        signature = canonical_json(info["schema"]).decode()
    else:
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


@dataclass(frozen=True)
class NamedTool:
    """A tool the configuration or a case names (SPEC §18.1), with where it is named."""

    tool: str
    where: str  #: ``file:line``
    label: str  #: ``evaluators[2] (criterion): field 'tool'`` / ``case 'c1': field 'fault.tool'``
    short: str  #: for a warning: ``fault_recovery.tool`` / ``case 'c1', expected.tools[0]``
    error: type[InputError]  #: ConfigError (oloproof.yaml) or CaseFileError (the cases)


def named_tools(project: Project, info: SuiteInfo | None = None) -> list[NamedTool]:
    """Every tool named by the evaluators of ``project`` (``fault_recovery.tool`` and
    ``escalate_tools``, ``agent_tool_called.tool_name``, ``agent_tool_permissions``'s map …:
    :meth:`~oloproof.evaluate.base.Evaluator.named_tools`) and, with ``info``, by the cases'
    faults and ``expected`` — in that order, where each is first named."""
    from oloproof.config.limits import quoted
    from oloproof.config.locate import dotted

    out: list[NamedTool] = []
    base = tuple(project.evaluators_path)
    for i, ev in enumerate(project.suite.evaluators):
        at = base + (i,)
        for path, tool in ev.named_tools():
            field = dotted(path)
            out.append(NamedTool(tool, project.locator.where(at + tuple(path)),
                                 f"{dotted(at)} ({ev.criterion}): field {quoted(field)}",
                                 f"{getattr(ev, 'type_name', type(ev).__name__)}."
                                 f"{dotted(p for p in path if not isinstance(p, int))}",
                                 ConfigError))
    if info is not None:
        for tool, where, case_id in info.fault_tools:
            out.append(NamedTool(tool, where, f"case {quoted(case_id)}: field 'fault.tool'",
                                 f"case {quoted(case_id)}, fault.tool", CaseFileError))
        for tool, where, case_id, field in info.expected_tools:
            out.append(NamedTool(tool, where, f"case {quoted(case_id)}: field {quoted(field)}",
                                 f"case {quoted(case_id)}, {field}", CaseFileError))
    return out


def check_tool_names(project: Project, info: SuiteInfo | None, system: LoadedSystem) -> list[NamedTool]:
    """Every tool the configuration and the cases name is one the system declares (SPEC
    §18.1): a located :class:`ConfigError` / :class:`CaseFileError` with a did-you-mean
    otherwise (exit 2), before anything runs. A system that declares no tool (a hand-built
    trajectory, an agent traced with OpenTelemetry) cannot be checked: the names are returned,
    once per tool, for :func:`uncalled_tools` to warn about after the run."""
    from oloproof.config.limits import quoted
    from oloproof.config.locate import did_you_mean

    named = named_tools(project, info)
    if not named:
        return []
    known = declared_tools(system.factory)
    if not known:
        first: dict[str, NamedTool] = {}
        for n in named:
            first.setdefault(n.tool, n)
        return list(first.values())
    functions = _tool_functions(system.factory)
    for n in named:
        if n.tool not in known:
            raise n.error(f"{n.where}: {n.label}: the system has no tool {quoted(n.tool)}"
                          f"{did_you_mean(n.tool, known)} (its tools: {', '.join(sorted(known))})")
        faulted = n.short.endswith("fault.tool") or n.short == "fault_recovery.tool"
        kind = (getattr(functions.get(n.tool), "__oloproof_tool__", None) or {}).get("kind")
        if faulted and kind == "model":  # it would never be applied: a fault that says nothing
            raise n.error(f"{n.where}: {n.label}: {quoted(n.tool)} is a model call (@tool(kind=\"model\")), "
                          "and model calls are never faulted; fault one of its tools")
    return []


def uncalled_tools(unchecked: list[NamedTool], called: set[str]) -> list[str]:
    """A warning for each tool :func:`check_tool_names` could not check that no case called."""
    from oloproof.config.limits import quoted

    return [f"{n.where} names tool {quoted(n.tool)} ({n.short}), which no case called and the system "
            "does not declare; a typo?" for n in unchecked if n.tool not in called]
