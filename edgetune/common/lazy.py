"""Package exports imported on first use (PEP 562), so that building the CLI's parser imports no TVM.

Importing TVM takes seconds; ``edgetune --help`` and a command's one-line error for
bad input should not wait for it. A package whose modules import TVM lists its
exports here instead of importing them in its ``__init__``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps a name to the submodule that defines it."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is not None:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        if importlib.util.find_spec(f"{package}.{name}") is not None:  # a submodule, as an eager __init__ had it
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
