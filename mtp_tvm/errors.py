"""One error vocabulary: every failure a user can cause is an ``MtpError`` with a one-line message."""


class MtpError(Exception):
    """A user-caused error (bad case, shape, dtype, target, path ...). The CLI prints it and exits 2."""

    exit_code = 2


class UsageError(MtpError):
    """Bad command-line or API arguments."""


class BuildError(MtpError):
    """TVM could not lower or build the module for the requested target."""

    exit_code = 3


def last_line(error: BaseException) -> str:
    """The line of a TVM error a user reads: its C++ traces are many lines, the message the last one (the
    exception's type name when it has no text)."""
    lines = [ln for ln in str(error).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(error).__name__


def _keep_ctrl_c_a_keyboard_interrupt() -> None:
    """Ctrl-C during a build lands in a Python callback TVM runs (a pass, an instrument). tvm-ffi carries the
    exception back through C++ by its registered name and rebuilds it on return, so an unregistered
    ``KeyboardInterrupt`` came back as an empty ``RuntimeError``: a "build failed" (exit 3) instead of an
    interrupt (exit 130). Registering the name keeps it a ``KeyboardInterrupt``."""
    import tvm_ffi

    tvm_ffi.error.register_error("KeyboardInterrupt", KeyboardInterrupt)


_keep_ctrl_c_a_keyboard_interrupt()
