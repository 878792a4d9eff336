"""Errors that name the input that caused them."""


class InputError(ValueError):
    """A user-supplied input (file, key, URL) is malformed or unusable.

    The message always starts with the offending input so a failing Snakemake job
    tells the user which file or key to fix.
    """

    def __init__(self, source: object, message: str) -> None:
        self.source = str(source)
        super().__init__(f"{source}: {message}")


class FetchError(InputError):
    """A file could not be obtained from the mirror or the network."""


class UsageError(Exception):
    """A command or a library call (vlbias.api) given what it cannot use; the message says what to do
    instead."""
