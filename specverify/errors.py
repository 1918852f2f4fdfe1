"""The exceptions specverify raises on purpose.

`InputError` is a user error: bad distributions, mismatched shapes, an unknown engine name. The CLI
prints its message on one line and exits 2. Anything else that escapes is a bug in specverify.
"""


class SpecVerifyError(Exception):
    """Base class of every error specverify raises deliberately."""


class InputError(SpecVerifyError, ValueError):
    """Bad input from the user or from the implementation under audit (one-line message)."""


class AdapterError(SpecVerifyError):
    """An engine or plug-in under audit could not be loaded, crashed or hung."""


class OutputError(InputError):
    """A result, report or file could not be written (full disk, a folder replaced by a file, no
    permission): one line and exit 2 like an input error, whatever the verdict was."""
