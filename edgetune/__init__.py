"""edgetune: tune neural networks for ARM boards and other devices with Apache TVM.

The package is laid out like the tuning loop it drives:
``profile`` -> ``board`` -> ``tasks`` -> ``search`` -> ``build`` -> ``measure``
-> ``history`` -> ``deploy``.

From Python: ``edgetune.tune(model, profile=..., trials=...)`` returns the run's
:class:`~edgetune.tuning.TuneSummary`, and ``edgetune.deploy(summary, board=...)``
ships it (see :mod:`edgetune.api`). Importing edgetune imports neither TVM nor torch.
"""

from edgetune._version import __version__

from edgetune.api import deploy, tune  # noqa: E402

__all__ = ["__version__", "deploy", "tune"]
