"""Errors a user can cause. The CLI prints them on one line and exits with status 2."""

from __future__ import annotations


class ExplorerError(Exception):
    """Base of every error Explorer reports to a user without a traceback."""


class TraceError(ExplorerError):
    """A trace file that cannot be read: the message names the file and what to do."""

    def __init__(self, path: object, problem: str, fix: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.fix = fix
        msg = f"{self.path}: {problem}"
        if fix:
            msg += f" — {fix}"
        super().__init__(msg)


class UsageError(ExplorerError):
    """The user asked for something that does not make sense (a step that does not exist...)."""


class OutputError(ExplorerError):
    """A file Explorer was asked to write but must not or cannot (it is the input, it
    exists, its folder is missing or read-only...): the message names the file and the fix."""

    def __init__(self, path: object, problem: str, fix: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.fix = fix
        msg = f"{self.path}: {problem}"
        if fix:
            msg += f" — {fix}"
        super().__init__(msg)


class OutputExists(OutputError):
    """The target exists and overwriting it was not asked for (``--force``)."""
