"""The bundled device profiles (``*.toml``), installed as ``edgetune.device_profiles``.

Only a marker: it makes the directory a package so that ``importlib.resources``
finds the files in every kind of install. See README.md for the schema.
"""
