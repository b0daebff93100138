"""User-facing errors: the CLI prints them as one line and exits with code 2."""


class GbError(Exception):
    """Bad input (config key, file, argument): the message names the culprit and the reason."""


class MissingInput(GbError):
    """Input gb needs that is absent or unusable (a data set's files, a package), the message saying what
    to set or run: the command stops at once (exit 2), never one failed row among others."""
