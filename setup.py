"""What pyproject.toml cannot say: the package list and one message filter.

The bundled profiles stay in ``device_profiles/`` at the repository root (the
place users and docs point at); ``package_dir`` maps that directory into the
package as ``edgetune.device_profiles``, so a wheel, ``pip install .`` and
``pip install -e .`` all ship and find them (``edgetune.profile.loader`` reads
them with ``importlib.resources``). ``edgetune.costmodel.data`` (the bundled
MetaTune model, no ``__init__.py``) is listed as a package of its own: setuptools
treats every directory under a package as one, and warns ("Package would be
ignored") about any that holds package data without being listed. Its files,
and every other setting, are in pyproject.toml.

The filter: ``pip install -e .`` builds an editable wheel whose import hook maps
``edgetune`` to ``edgetune/`` and ``edgetune.device_profiles`` to
``device_profiles/``, and setuptools then adds a note ("Editable installation.
Please be careful with folders in your working directory with the same name as
your package") as an ``InformationOnly`` warning, which pip prints as one. The
hook is the only editable mode that works here: a ``.pth`` entry (what setuptools
does when ``package_dir`` is just ``{"": DIR}`` with every package in DIR, or in
"compat" mode) would put the repository root on ``sys.path``, where
``edgetune.device_profiles`` does not exist, and "strict" mode (a link tree under
``build/``) adds the same kind of note. Only that note is dropped; every other
setuptools warning still shows (tests/test_packaging.py fails on them).
"""

import warnings
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.warnings import InformationOnly

warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)

# data directories (no __init__.py) shipped as packages; schedules/data exists once a library is shipped
DATA_PACKAGES = [name for name in ("edgetune.costmodel.data", "edgetune.schedules.data")
                 if (Path(__file__).parent / name.replace(".", "/")).is_dir()]

setup(
    packages=[*find_packages(include=["edgetune", "edgetune.*"]), *DATA_PACKAGES, "edgetune.device_profiles"],
    package_dir={"edgetune.device_profiles": "device_profiles"},
)
