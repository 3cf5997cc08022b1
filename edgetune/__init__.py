"""edgetune: tune neural networks for ARM boards and other devices with Apache TVM.

The package is laid out like the tuning loop it drives:
``profile`` -> ``board`` -> ``tasks`` -> ``search`` -> ``build`` -> ``measure``
-> ``history`` -> ``deploy``.
"""

__version__ = "0.1.0"
