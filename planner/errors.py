"""The modelplan error hierarchy: caught once in the CLI, printed as clear lines."""

from __future__ import annotations


class ModelplanError(Exception):
    """Base class. Each line of the message says what is wrong, where, and how to fix it."""

    exit_code = 1

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class ConfigError(ModelplanError):
    """The composed config is invalid (bad override, unknown key, bad value)."""

    exit_code = 2


class UsageError(ModelplanError):
    """A command-line argument cannot be used (an unwritable path, a bad name)."""

    exit_code = 2


class PlanError(ModelplanError):
    """The config is valid but contradictory: the planner rejects it (rule `reject`)."""

    exit_code = 2


class PlanFileError(ModelplanError):
    """A saved plan cannot be used (invalid, tampered, or from an incompatible version)."""

    exit_code = 2


class StepError(ModelplanError):
    """A step failed while running."""

    exit_code = 1


class RequiresError(StepError):
    """A step's input lacks a fact its op requires (a precondition, checked before it runs)."""


class EnsuresError(StepError):
    """A step's output lacks a fact its op ensures or keeps (a postcondition, observed after
    it ran)."""


class InternalError(ModelplanError):
    """modelplan broke one of its own invariants: a bug to report, not a user mistake."""

    exit_code = 1


class StoreError(ModelplanError):
    """The store given cannot be used (a bad --store / store.path)."""

    exit_code = 2


class IntegrityError(ModelplanError):
    """A store entry changed under a run (after it was verified): nothing corrupt is used."""

    exit_code = 1


class RunInterrupted(ModelplanError):
    """SIGINT or SIGTERM stopped the work; the exit status is 128 + the signal's number."""

    def __init__(self, signum: int, *lines: str) -> None:
        super().__init__(*lines)
        self.exit_code = 128 + signum
