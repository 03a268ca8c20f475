"""One exception tree for everything Oloproof raises on purpose.

::

    OloproofError
    ├── InputError            bad input: exit code 2, nothing written to the log
    │   ├── ConfigError       oloproof.yaml / release.yaml (file, line, field)
    │   ├── CaseFileError     a JSONL case file (file, line, case, field)
    │   └── UsageError        a CLI argument or a run id that does not exist
    ├── RecordError           a record written by a system is invalid (case, field)
    ├── ExecutorError         the workers are gone (a cluster lost every worker): exit 3
    └── StoreError            the log itself
        ├── CorruptLogError   the log cannot be read as Oloproof events
        ├── DuplicateEventError  a (stream, sequence) already exists; the batch rolled back
        └── RunBusyError      another process is recording or resuming the run

    Interrupted (a BaseException)  the run was stopped (Ctrl-C): never recorded as a case's error

Backend errors (sqlite3, pydantic, yaml) are translated at the boundary with
``raise ... from e`` so callers only ever catch these.
"""

from __future__ import annotations


class OloproofError(Exception):
    """Root of every error Oloproof raises on purpose."""

    exit_code = 2  # 1 means only "the gate is blocked"


class InputError(OloproofError):
    """Bad input from the user; the CLI exits with code 2 and nothing is written."""

    exit_code = 2


class ConfigError(InputError):
    """A configuration file is invalid. The message names file, line and field."""


class CaseFileError(InputError):
    """A case file is invalid. The message names file, line, case id and field."""


class UsageError(InputError):
    """A command-line argument is invalid (unknown run id, bad option value...)."""


class RecordError(OloproofError):
    """A record written by a system under test is invalid (names the case and field)."""


class ExecutorError(OloproofError):
    """Where cases run failed as a whole (not one case): the run stops, committed cases kept."""

    exit_code = 3


class StoreError(OloproofError):
    """The event log could not be read or written."""

    exit_code = 2


class CorruptLogError(StoreError):
    """The log holds something that is not a valid Oloproof event."""


class DuplicateEventError(StoreError):
    """An event with the same (stream, sequence) exists; the whole batch rolled back."""


class RunBusyError(StoreError):
    """Another process is writing the run (recording or resuming it); nothing was written."""


class Interrupted(BaseException):
    """The run was interrupted by its operator (Ctrl-C). Unlike a ``KeyboardInterrupt`` that a
    system under test raises itself (recorded as that case's error), this ends the run; the
    cases committed so far are kept."""
