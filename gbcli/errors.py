"""User-facing errors: the CLI prints them as one line and exits with code 2."""


class GbError(Exception):
    """Bad input (config key, file, argument): the message names the culprit and the reason."""
