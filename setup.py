"""What pyproject.toml cannot say: the bundled profiles become ``edgetune.device_profiles``.

The profiles stay in ``device_profiles/`` at the repository root (the place
users and docs point at); this maps that directory into the package, so a
wheel, ``pip install .`` and ``pip install -e .`` all ship and find them
(``edgetune.profile.loader`` reads them with ``importlib.resources``). Every
other setting is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["edgetune", "edgetune.*"]), "edgetune.device_profiles"],
    package_dir={"edgetune.device_profiles": "device_profiles"},
)
