"""Exceptions that mean "the input is wrong": the CLI turns them into a message and exit code 2."""

import math
import numbers


class TokswapError(ValueError):
    """Base class for errors a user can fix; the message names the problem and the fix."""


def _label(name: str, flag=None) -> str:
    return f"{name} ({flag})" if flag else name


def check_positive_int(error, name: str, value, flag=None, optional: bool = False, minimum: int = 1) -> None:
    """Raise `error` (a `TokswapError` subclass) unless `value` is an integer >= `minimum` (or None if `optional`).

    The one-line message names the option (and its CLI flag, when given) and the allowed range.
    """
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise error(f"{_label(name, flag)} must be an integer >= {minimum}, got {value!r}.")


def check_positive(error, name: str, value, flag=None, optional: bool = False) -> None:
    """Raise `error` unless `value` is a finite number > 0 (or None if `optional`)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value > 0 and math.isfinite(value)):
        raise error(f"{_label(name, flag)} must be a finite number > 0, got {value!r}.")


def check_fraction(error, name: str, value, flag=None, optional: bool = False, closed: bool = False) -> None:
    """Raise `error` unless `value` is in [0, 1) ([0, 1] when `closed`), or None if `optional`."""
    if optional and value is None:
        return
    ok = (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and (0 <= value <= 1 if closed else 0 <= value < 1)
    )
    if not ok:
        raise error(f"{_label(name, flag)} must be in [0, 1{']' if closed else ')'}, got {value!r}.")


class TrainingError(TokswapError):
    """A training run cannot start as configured (the message says what to change)."""


class NonFiniteError(TokswapError):
    """A model holds NaN or infinite weights, or a run logged a NaN or infinite loss or gradient norm."""


class AlignmentError(TokswapError):
    """Raised when an alignment cannot be built or does not fit the tokenizers it is used with."""


class UnverifiedAlignmentError(AlignmentError):
    """Raised when an alignment's files cannot be shown to be the ones tokswap saved (no checksums, or a mismatch)."""


class CorpusError(TokswapError):
    """The corpus could not be built from the requested arguments."""
