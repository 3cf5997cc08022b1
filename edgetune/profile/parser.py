"""Profile parsing: TOML-shaped data validated into a :class:`~edgetune.profile.schema.DeviceProfile`.

Every message starts with the profile's origin and says what a key must be and what it got instead; an
unknown key is named with the closest known one.
"""

from __future__ import annotations

import copy
import difflib
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgetune.errors import ProfileError
from edgetune.profile.schema import (
    ALL_KEYS,
    CPU_KINDS,
    DEVICE_FOR_KIND,
    DeviceProfile,
    RPC_DEVICES,
    SECTIONS,
    TOP_LEVEL_KEYS,
    _DERIVED,
    _DESCRIPTION_SPEC,
    _Mismatch,
    _NAME_SPEC,
    _SECTION_CLASSES,
    _Spec,
    _is_int,
    _nonempty_string,
)


def parse_profile(data: Mapping[str, Any], *, origin: str, source: Path | None = None) -> DeviceProfile:
    """Validate TOML-shaped ``data`` into a profile; ``origin`` prefixes every error message."""
    return _Parser(origin).parse(data, source)


class _Parser:
    """Validation state for one profile: the origin every message starts with."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def error(self, message: str) -> ProfileError:
        return ProfileError(f"{self.origin}: {message}")

    def mismatch(self, key: str, spec: _Spec, value: Any, hint: str = "") -> ProfileError:
        return self.error(
            f"key '{key}' must be {spec.expected}, got {value!r} ({type(value).__name__}) instead{hint}"
        )

    def unknown(self, key: str, valid: tuple[str, ...]) -> ProfileError:
        """Suggest a key of the same table first, else the same name in another table."""
        leaf = key.rpartition(".")[2]
        # compare last parts only: a shared "measure." prefix would make any two keys look alike
        for candidates in (valid, ALL_KEYS):
            by_leaf = {k.rpartition(".")[2]: k for k in candidates}
            close = [by_leaf[m] for m in difflib.get_close_matches(leaf, list(by_leaf), n=1)]
            if close:
                return self.error(f"unknown key '{key}' (did you mean '{close[0]}'?)")
        return self.error(f"unknown key '{key}'; valid keys: {', '.join(valid)}")

    def check(self, key: str, spec: _Spec, value: Any) -> Any:
        try:
            return spec.convert(value)
        except _Mismatch as exc:
            raise self.mismatch(key, spec, value, exc.hint) from None

    def table(self, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(f"key '{key}' must be a table, got {value!r} ({type(value).__name__}) instead")
        return value

    def target_table(self, key: str, value: Any) -> dict[str, Any]:
        """A TVM target dict: passed to TVM verbatim, so only its shape is checked here."""
        table = self.table(key, value)
        if "kind" not in table:
            raise self.error(f"missing required key '{key}.kind'")
        self.check(f"{key}.kind", _nonempty_string(), table["kind"])
        if "host" in table:
            raise self.error(f"key '{key}.host' is not allowed; put the host target in [host_target]")
        scalar = (str, int, float, bool)
        for option, option_value in table.items():
            if not isinstance(option_value, scalar) and not (
                isinstance(option_value, list) and all(isinstance(v, scalar) for v in option_value)
            ):
                raise self.error(
                    f"key '{key}.{option}' must be a string, number, boolean or list of those, "
                    f"got {option_value!r} ({type(option_value).__name__}) instead"
                )
        return copy.deepcopy(table)

    def section(self, name: str, value: Any) -> dict[str, Any]:
        table = self.table(name, value)
        specs = SECTIONS[name]
        valid = tuple(f"{name}.{key}" for key in specs)
        values = {}
        for key, item in table.items():
            if key not in specs:
                raise self.unknown(f"{name}.{key}", valid)
            values[key] = self.check(f"{name}.{key}", specs[key], item)
        return {key: values.get(key, spec.default) for key, spec in specs.items()}

    def parse(self, data: Mapping[str, Any], source: Path | None) -> DeviceProfile:
        for key in data:
            if key not in TOP_LEVEL_KEYS:
                raise self.unknown(key, TOP_LEVEL_KEYS)
        for required in ("name", "target"):
            if required not in data:
                raise self.error(f"missing required key '{required}'")
        name = self.check("name", _NAME_SPEC, data["name"])
        description = self.check("description", _DESCRIPTION_SPEC, data.get("description", ""))
        target = self.target_table("target", data["target"])
        host_target = self.target_table("host_target", data["host_target"]) if "host_target" in data else None
        sections = {section: self.section(section, data.get(section, {})) for section in SECTIONS}
        resolved = self.resolve_host(target, host_target, sections)
        self.derive_defaults(name, target, host_target, sections)
        if resolved and sections["device"]["peak_gflops"] is None:
            from edgetune.profile.host import host_cpu

            sections["device"]["peak_gflops"] = host_cpu().peak_gflops
            if sections["device"]["peak_gflops"] is not None:
                resolved["device.peak_gflops"] = f"estimated {host_cpu().describe()}"
        return DeviceProfile(
            resolved=resolved,
            name=name,
            description=description,
            source=source,
            target=target,
            host_target=host_target,
            _raw=copy.deepcopy(dict(data)),
            **{section: _SECTION_CLASSES[section](**values) for section, values in sections.items()},
        )

    def resolve_host(
        self, target: dict[str, Any], host_target: dict[str, Any] | None, sections: dict[str, dict[str, Any]]
    ) -> dict[str, str]:
        """``mcpu = "native"`` and ``num-cores = "auto"``: this machine's CPU and usable cores (see profile.host)."""
        from edgetune.profile.host import AUTO_CORES, NATIVE_CPU

        resolved: dict[str, str] = {}
        for key, table in (("target", target), ("host_target", host_target)):
            if table is None:
                continue
            if table.get("mcpu") == NATIVE_CPU:
                triple = table.get("mtriple")
                arch = triple.split("-")[0] if isinstance(triple, str) and triple else platform.machine()
                if sections["build"]["cross_compiler"] or arch != platform.machine():
                    raise self.error(
                        f"key '{key}.mcpu' is 'native' (this {platform.machine()} machine's CPU) but the profile "
                        f"compiles for {arch}; name the board's CPU instead, e.g. 'cortex-a72'"
                    )
                from edgetune.profile.host import host_cpu

                cpu = host_cpu()
                table["mcpu"] = cpu.name
                resolved[f"{key}.mcpu"] = f"native -> {table['mcpu']}"
                # the model's instructions this machine does not offer (a VM that masks AVX-512) stay off,
                # unless the profile names them itself
                named = {str(a)[1:] for a in table.get("mattr") or []}
                off = [m for m in cpu.mattr if m[1:] not in named]
                if off:
                    table["mattr"] = [*(table.get("mattr") or []), *off]
                    resolved[f"{key}.mattr"] = (
                        f"native -> {', '.join(off)} (instructions a {cpu.name} has and this machine does not offer)"
                    )
            if table.get("num-cores") == AUTO_CORES:
                from edgetune.profile.host import usable_cores

                table["num-cores"] = usable_cores()
                resolved[f"{key}.num-cores"] = f"auto -> {table['num-cores']}"
            elif isinstance(table.get("num-cores"), str):
                raise self.error(f"key '{key}.num-cores' must be an integer or 'auto', got {table['num-cores']!r} instead")
        return resolved

    def derive_defaults(
        self,
        name: str,
        target: dict[str, Any],
        host_target: dict[str, Any] | None,
        sections: dict[str, dict[str, Any]],
    ) -> None:
        """Fill defaults that follow from other keys and reject contradictions between keys."""
        rpc, device = sections["rpc"], sections["device"]
        kind = target["kind"]
        if rpc["key"] is _DERIVED:
            rpc["key"] = name
        runs_on = DEVICE_FOR_KIND.get(kind)
        if rpc["device"] is _DERIVED:
            if runs_on is None:
                raise self.error(
                    f"key 'rpc.device' is required for target kind '{kind}'; "
                    f"set it to one of {', '.join(RPC_DEVICES)}"
                )
            rpc["device"] = runs_on
        elif runs_on is not None and rpc["device"] != runs_on:
            raise self.error(f"key 'rpc.device' is '{rpc['device']}' but target kind '{kind}' runs on '{runs_on}'")

        # The CPU that runs the RPC server is described by the target itself for CPU
        # kinds, by the host target for accelerators.
        cpu_target = target if kind in CPU_KINDS else host_target or {}
        if device["arch"] is _DERIVED:
            triple = cpu_target.get("mtriple")
            device["arch"] = triple.split("-")[0] if isinstance(triple, str) and triple else platform.machine()
        if device["num_threads"] is _DERIVED:
            cores = cpu_target.get("num-cores")
            device["num_threads"] = cores if _is_int(cores) and cores >= 1 else 1
        affinity = device["core_affinity"]
        if affinity and device["num_threads"] > len(affinity):
            raise self.error(
                f"key 'device.num_threads' is {device['num_threads']} but 'device.core_affinity' "
                f"pins the server to only {len(affinity)} CPU{'s' if len(affinity) != 1 else ''}"
            )
