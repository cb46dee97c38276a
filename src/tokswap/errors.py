"""Exceptions that mean "the input is wrong": the CLI turns them into a message and exit code 2."""


class TokswapError(ValueError):
    """Base class for errors a user can fix; the message names the problem and the fix."""
