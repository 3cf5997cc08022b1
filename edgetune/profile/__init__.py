"""Device profiles: one TOML file per board describing target, build, RPC, measurement and tuning.

Typical use::

    from edgetune.profile import load_profile

    profile = load_profile("rk3399").with_overrides(tuning={"trials": 64})
    profile.check_buildable()
    target = profile.tvm_target()
"""

from edgetune.profile.loader import (
    BUNDLED_DIR,
    PATH_ENV,
    list_profiles,
    load_profile,
    profile_search_path,
    validate_profile_file,
)
from edgetune.profile.schema import (
    COST_MODELS,
    RPC_DEVICES,
    SEARCH_STRATEGIES,
    TASK_SCHEDULERS,
    BuildSettings,
    DeviceProfile,
    DeviceSettings,
    MeasureSettings,
    RPCSettings,
    TuningSettings,
)
from edgetune.profile.parser import parse_profile

__all__ = [
    "BUNDLED_DIR",
    "COST_MODELS",
    "PATH_ENV",
    "RPC_DEVICES",
    "SEARCH_STRATEGIES",
    "TASK_SCHEDULERS",
    "BuildSettings",
    "DeviceProfile",
    "DeviceSettings",
    "MeasureSettings",
    "RPCSettings",
    "TuningSettings",
    "list_profiles",
    "load_profile",
    "parse_profile",
    "profile_search_path",
    "validate_profile_file",
]
