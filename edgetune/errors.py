"""One error hierarchy for edgetune.

Every error edgetune raises on purpose is an :class:`EdgetuneError`, and also a
subclass of the built-in exception a caller would naturally catch (a bad profile
is a ``ValueError``, an unreachable tracker a ``ConnectionError``...). The CLI
prints ``str(error)`` as one line and exits non-zero; messages therefore name
what was expected, what was found, and how to diagnose it.
"""

from __future__ import annotations


class EdgetuneError(Exception):
    """Base class of every error edgetune raises deliberately."""

    #: process exit code used by the CLI for this kind of error
    exit_code: int = 1


class OptionError(EdgetuneError, ValueError):
    """An option of a command (a flag, or an argument of the Python API) has a value edgetune cannot use."""

    exit_code = 2


class ProfileError(EdgetuneError, ValueError):
    """A device profile is missing, malformed or inconsistent."""

    exit_code = 2


class ModelError(EdgetuneError, ValueError):
    """A model file or model name cannot be loaded."""

    exit_code = 2


class TargetError(EdgetuneError, ValueError):
    """The installed TVM cannot build for the profile's target."""

    exit_code = 2


class SchedulerError(EdgetuneError, ValueError):
    """A task scheduler was given invalid hyperparameters."""

    exit_code = 2


class BoardError(EdgetuneError, ConnectionError):
    """A tracker, RPC server or board cannot be reached or used."""

    exit_code = 3


class TrackerUnreachableError(BoardError):
    """Nothing answers at the tracker address."""


class NoFreeDeviceError(BoardError):
    """The tracker answers but has no free device under the requested key."""


class HostKeyError(BoardError):
    """A board's SSH host key is unknown or differs from the one in known_hosts."""


class ProvisionError(BoardError):
    """A board was reached but cannot be brought up (wrong arch, no python3, no wheel...)."""


class DeployError(BoardError):
    """A deployment cannot be uploaded, switched or rolled back on a board."""


class DeployInputError(EdgetuneError, ValueError):
    """``edgetune deploy`` was given arguments or a run directory it cannot use."""

    exit_code = 2


class VerificationError(DeployError):
    """A deployed model runs on the board but its outputs differ from the host reference."""

    exit_code = 5


class InventoryError(EdgetuneError, ValueError):
    """The board inventory file is missing, malformed or has no such board."""

    exit_code = 2


class ReportError(EdgetuneError, ValueError):
    """``edgetune report`` was given a directory that is not a readable tune run, or cannot write the report."""

    exit_code = 2


class CostModelError(EdgetuneError, ValueError):
    """A MetaTune model file is missing, corrupt or of another version, or its extra is not installed."""

    exit_code = 2


class RecipeError(EdgetuneError, ValueError):
    """A recorded recipe (how a run's graph was prepared) cannot be read, or is not the one asked for."""

    exit_code = 2


class HistoryError(EdgetuneError, RuntimeError):
    """The history database cannot be opened, read or written."""

    exit_code = 4


class TuningInterrupted(EdgetuneError, KeyboardInterrupt):
    """Tuning was stopped by the user; finished measurements are kept.

    Exits 130 after Ctrl-C and 128 + N after signal N (143 for ``kill``), as a shell would.
    """

    exit_code = 130

    def __init__(self, message: str, signum: int | None = None) -> None:
        super().__init__(message)
        if signum is not None:
            self.exit_code = 128 + int(signum)


class DeviceLimitError(EdgetuneError, ValueError):
    """A candidate needs more of the device than it has (work-group size, local memory)."""

    exit_code = 2


class OpenCLUnavailableError(EdgetuneError, RuntimeError):
    """No OpenCL implementation on this host to run generated kernels on (pyopencl, an ICD such as pocl)."""

    exit_code = 3


class RuntimeBuildError(EdgetuneError, RuntimeError):
    """A board runtime could not be (fully) built on the host: a tool or a source file is missing."""

    exit_code = 3


class LibraryError(EdgetuneError, ValueError):
    """A schedule library file is damaged, of another format version, or made by another TVM."""

    exit_code = 2
