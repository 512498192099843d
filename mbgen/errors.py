"""Errors that point the user at the exact place in their mechanism file."""

from __future__ import annotations


class MbgenError(Exception):
    """Base class for every error mbgen raises on purpose."""


class MechanismError(MbgenError):
    """Bad input in a mechanism file: says which file, line and key are at fault."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        where = file or "<mechanism>"
        if line is not None:
            where += f":{line}"
        if key:
            where += f" [{key}]"
        super().__init__(f"{where}: {message}")


class DerivationBudgetError(MechanismError):
    """A derivation would exceed its work budget (an expression too large to cancel or
    invert in bounded time): names the file, the body's line and the expression."""


class SingularConfigurationError(MbgenError):
    """The dynamics have no unique solution at this configuration (dead point, lost rank)."""


class TrajectoryError(MbgenError):
    """Bad prescribed motion: names the file and line (or the expression) at fault."""


class UntrustedResultError(MbgenError):
    """The computation ran, but its result is not to be trusted: a solver that did not
    converge, NaN or inf in the output, a run that stopped early, a parameter the data do
    not determine. The command line exits with code 4 on it."""


class MbgenWarning(UserWarning):
    """Something works, but not as well as it could (the CLI prints it as one line)."""
