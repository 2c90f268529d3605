"""Errors a user can cause. The CLI prints them on one line and exits with status 2."""

from __future__ import annotations


class ExplorerError(Exception):
    """Base of every error Explorer reports to a user without a traceback."""


class FileError(ExplorerError):
    """A problem with one file: ``path: problem — fix``."""

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


class TraceError(FileError):
    """A trace file that cannot be read: the message names the file and what to do."""


class OutputError(FileError):
    """A file Explorer was asked to write but must not or cannot (it is the input, it
    exists, its folder is missing or read-only...): the message names the file and the fix."""


class OutputExists(OutputError):
    """The target exists and overwriting it was not asked for (``--force``)."""
