"""The board inventory: which boards exist, how to reach them, which profile each is.

A TOML file (``--inventory FILE`` or ``EDGETUNE_INVENTORY``), see
``rpc_setup/boards.example.toml``. Passwords are refused on purpose: boards are
reached with keys (an identity file, ssh-agent or a ``~/.ssh/config`` alias).
"""

from __future__ import annotations

import getpass
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from ..errors import InventoryError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENV_VAR = "EDGETUNE_INVENTORY"
MODES = ("tunnel", "direct")
RUNTIMES = ("wheels", "preinstalled")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PATH_RE = re.compile(r"[A-Za-z0-9~/._+-]+")
_SECRET_KEYS = ("password", "passphrase", "pass", "secret")


@dataclass(frozen=True)
class TrackerSettings:
    """The host tracker every board registers with."""

    host: str = "127.0.0.1"
    port: int = 9190
    #: address direct-mode boards dial to reach the tracker (the host's LAN address)
    advertise: str = ""


@dataclass(frozen=True)
class BoardEntry:
    """One board of the inventory, with every default filled in."""

    name: str
    host: str
    profile: str
    port: int = 22
    user: str = ""
    identity_file: str = ""
    key: str = ""
    mode: str = "tunnel"
    rpc_port: int = 9090
    remote_dir: str = "~/.edgetune"
    python: str = "python3"
    governor: str = ""
    #: "wheels": install the host's TVM from uploaded wheels; "preinstalled": a runtime
    #: built on the board (32-bit ARM) already in ``remote_dir/venv``, only checked
    runtime: str = "wheels"
    known_hosts: str = "~/.ssh/known_hosts"
    connect_timeout_sec: float = 10.0
    #: where the board's sysfs is mounted (temperature and CPU frequency are read below it)
    sysfs_root: str = "/sys"
    #: ``host`` as written (a ``~/.ssh/config`` alias keeps working for the OpenSSH tunnel)
    alias: str = ""

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    @property
    def known_hosts_path(self) -> Path:
        return Path(os.path.expanduser(self.known_hosts))

    def rpc_key(self, profile: Any) -> str:
        """The tracker key: the entry's ``key``, else the profile's ``rpc.key``."""
        return self.key or profile.rpc.key


_BOARD_FIELDS = {
    "host": str, "profile": str, "port": int, "user": str, "identity_file": str, "key": str,
    "mode": str, "rpc_port": int, "remote_dir": str, "python": str, "governor": str, "runtime": str,
    "known_hosts": str, "connect_timeout_sec": float, "sysfs_root": str,
}
_TRACKER_FIELDS = {"host": str, "port": int, "advertise": str}


@dataclass(frozen=True)
class Inventory:
    """All boards of one inventory file plus the tracker they share."""

    path: Path
    tracker: TrackerSettings
    boards: dict[str, BoardEntry] = field(default_factory=dict)

    def get(self, name: str) -> BoardEntry:
        try:
            return self.boards[name]
        except KeyError:
            known = ", ".join(sorted(self.boards)) or "none"
            raise InventoryError(
                f"no board named {name!r} in the inventory {self.path} (boards: {known})"
            ) from None

    def select(self, names: list[str], all_boards: bool) -> list[BoardEntry]:
        """The entries named, or all of them with ``--all``."""
        if all_boards:
            if not self.boards:
                raise InventoryError(f"the inventory {self.path} lists no boards")
            return list(self.boards.values())
        if not names:
            raise InventoryError("name at least one board, or pass --all")
        return [self.get(name) for name in names]


def inventory_path(explicit: str | os.PathLike[str] | None) -> Path:
    """``--inventory`` if given, else ``$EDGETUNE_INVENTORY``."""
    text = explicit or os.environ.get(ENV_VAR)
    if not text:
        raise InventoryError(
            f"no board inventory: pass --inventory FILE or set {ENV_VAR} "
            "(start from rpc_setup/boards.example.toml)"
        )
    return Path(os.path.expanduser(str(text)))


def load_inventory(explicit: str | os.PathLike[str] | None = None) -> Inventory:
    """Read and validate the inventory file; every problem is one :class:`InventoryError`."""
    path = inventory_path(explicit)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InventoryError(f"inventory file {path} not found (start from rpc_setup/boards.example.toml)") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InventoryError(f"cannot read inventory {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise InventoryError(f"inventory {path} is not valid TOML: {error}") from None
    return parse_inventory(data, path)


def parse_inventory(data: Mapping[str, Any], path: Path) -> Inventory:
    _refuse_secrets(data, path, "")
    unknown = set(data) - {"tracker", "defaults", "boards"}
    if unknown:
        raise InventoryError(
            f"inventory {path}: unknown top-level key(s) {', '.join(sorted(unknown))}; "
            "expected [tracker], [defaults] and [boards.NAME] tables"
        )
    tracker = TrackerSettings(**_typed(data.get("tracker", {}), _TRACKER_FIELDS, path, "[tracker]"))
    defaults = _typed(data.get("defaults", {}), _BOARD_FIELDS, path, "[defaults]")
    boards: dict[str, BoardEntry] = {}
    raw_boards = data.get("boards", {})
    if not isinstance(raw_boards, Mapping):
        raise InventoryError(f"inventory {path}: 'boards' must be tables [boards.NAME]")
    for name, raw in raw_boards.items():
        if not _NAME_RE.fullmatch(name):
            raise InventoryError(f"inventory {path}: board name {name!r} must match {_NAME_RE.pattern}")
        values = {**defaults, **_typed(raw, _BOARD_FIELDS, path, f"[boards.{name}]")}
        for required in ("host", "profile"):
            if not values.get(required):
                raise InventoryError(f"inventory {path}: [boards.{name}] needs '{required}'")
        entry = _resolve_ssh_config(BoardEntry(name=name, **values))
        if entry.mode not in MODES:
            raise InventoryError(
                f"inventory {path}: [boards.{name}] mode must be one of {', '.join(MODES)}, got {entry.mode!r}"
            )
        for key in ("remote_dir", "python", "sysfs_root"):
            # both end up in shell commands on the board: no spaces or shell syntax
            if not _PATH_RE.fullmatch(getattr(entry, key)):
                raise InventoryError(
                    f"inventory {path}: [boards.{name}] {key} {getattr(entry, key)!r} may only contain "
                    "letters, digits and ~ / . _ + -"
                )
        if entry.runtime not in RUNTIMES:
            raise InventoryError(
                f"inventory {path}: [boards.{name}] runtime must be one of {', '.join(RUNTIMES)}, got {entry.runtime!r}"
            )
        boards[name] = entry
    _check_ports(boards, tracker, path)
    return Inventory(path=path, tracker=tracker, boards=boards)


def _refuse_secrets(data: Any, path: Path, where: str) -> None:
    if isinstance(data, Mapping):
        for key, value in data.items():
            if str(key).lower() in _SECRET_KEYS:
                raise InventoryError(
                    f"inventory {path}: '{where}{key}' - passwords are not accepted in inventory files; "
                    "use an identity_file, ssh-agent or a ~/.ssh/config alias instead"
                )
            _refuse_secrets(value, path, f"{where}{key}.")


def _typed(raw: Any, spec: Mapping[str, type], path: Path, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise InventoryError(f"inventory {path}: {where} must be a table")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        kind = spec.get(key)
        if kind is None:
            raise InventoryError(
                f"inventory {path}: unknown key '{key}' in {where} (valid: {', '.join(sorted(spec))})"
            )
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InventoryError(
                f"inventory {path}: {where} {key} must be {kind.__name__}, got {value!r}"
            )
        if kind is int and not 0 < value < 65536:
            raise InventoryError(f"inventory {path}: {where} {key} must be a TCP port, got {value}")
        out[key] = value
    return out


def _resolve_ssh_config(entry: BoardEntry) -> BoardEntry:
    """Fill host/port/user/identity from ``~/.ssh/config`` when ``host`` is an alias there."""
    import paramiko

    config_path = Path(os.path.expanduser("~/.ssh/config"))
    values: dict[str, Any] = {"alias": entry.host}
    if config_path.is_file():
        try:
            found = paramiko.SSHConfig.from_path(str(config_path)).lookup(entry.host)
        except Exception:  # a config paramiko cannot parse: use the entry as written
            found = {}
        values["host"] = found.get("hostname", entry.host)
        if entry.port == 22 and "port" in found:
            values["port"] = int(found["port"])
        if not entry.user and "user" in found:
            values["user"] = found["user"]
        if not entry.identity_file and found.get("identityfile"):
            values["identity_file"] = found["identityfile"][0]
    if not (values.get("user") or entry.user):
        values["user"] = getpass.getuser()
    return replace(entry, **values)


def _check_ports(boards: Mapping[str, BoardEntry], tracker: TrackerSettings, path: Path) -> None:
    """Tunnel-mode boards forward their RPC port to the same host port: they must differ."""
    seen: dict[int, str] = {}
    for entry in boards.values():
        if entry.mode != "tunnel":
            continue
        if entry.rpc_port == tracker.port:
            raise InventoryError(
                f"inventory {path}: [boards.{entry.name}] rpc_port {entry.rpc_port} is the tracker port"
            )
        other = seen.setdefault(entry.rpc_port, entry.name)
        if other != entry.name:
            raise InventoryError(
                f"inventory {path}: boards {other!r} and {entry.name!r} both use rpc_port {entry.rpc_port}; "
                "tunnel-mode boards are forwarded to the same port on this host, give each its own rpc_port"
            )
