"""One error vocabulary: every failure a user can cause is an ``MtpError`` with a one-line message."""


class MtpError(Exception):
    """A user-caused error (bad case, shape, dtype, target, path ...). The CLI prints it and exits 2."""

    exit_code = 2


class UsageError(MtpError):
    """Bad command-line or API arguments."""


class BuildError(MtpError):
    """TVM could not lower or build the module for the requested target."""

    exit_code = 3
