"""User-facing errors: the CLI prints them as one line and exits with code 2."""


class GbError(Exception):
    """Bad input (config key, file, argument): the message names the culprit and the reason."""


class MissingInput(GbError):
    """Input gb needs that is absent or unusable where it looked (a data set's files, a package):
    the message says what to set or run. Never a per-result failure: a command that meets it stops
    at once (exit 2), where a damaged result of its own would be one row among others."""
