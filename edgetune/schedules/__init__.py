"""Schedule libraries: tuned schedules per CPU family, built from a zoo, shipped, and used to start every tune.

``family`` names the CPU family of a target; ``library`` reads and writes the
versioned file; ``use`` picks a library for a run and replays its schedules.
Building one tunes a zoo, so that is :mod:`edgetune.tuning.zoo`, above this
package (tuning uses a library; a library never imports tuning).
"""

from ..common.cpu_family import CpuFamily, family_of
from .export import export_library
from .library import LIBRARY_FORMAT, LIBRARY_VERSION, ScheduleLibrary, load_library, merge_libraries

__all__ = ["CpuFamily", "LIBRARY_FORMAT", "LIBRARY_VERSION", "ScheduleLibrary", "export_library", "family_of", "load_library",
           "merge_libraries"]
