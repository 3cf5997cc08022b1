"""edgetune.deploy: ship a tuned model to a board (``edgetune deploy``).

The package is also callable: ``edgetune.deploy(run, board=...)`` is
:func:`edgetune.api.deploy` (both run :func:`edgetune.deploy.run.deploy_run`). (A function named ``deploy`` beside this package in
``edgetune`` would be replaced by the package as soon as one of its modules is
imported, so the package itself answers the call.)
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .run import deploy_run

        return deploy_run(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
