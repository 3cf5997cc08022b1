"""Build (once) Debian root filesystems for test boards: arm64 and armhf under qemu-user, and a minimal amd64 one.

The arm64 rootfs is the "emulated arm64 board" of the provisioning tests: an sshd
chroots into it, so every command the provisioner runs there is real aarch64
code executed by ``qemu-aarch64-static`` through binfmt_misc. The armhf one is
the emulated 32-bit Raspberry Pi OS board (``uname -m`` = armv7l under ``qemu-arm-static``).

It is cached under ``/var/cache/edgetune-test/`` (``EDGETUNE_TEST_CACHE``
overrides) in a directory named by a hash of the recipe, so a second run costs
nothing and a changed recipe builds a fresh one. Build it alone with::

    python -m tests.harness.arm64_rootfs
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SUITE = "bookworm"
MIRROR = os.environ.get("EDGETUNE_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# python3 for the runtime venv, util-linux for taskset (already in minbase)
INCLUDE = ("python3", "python3-venv")
RECIPE_VERSION = "1"  # bump when the steps below change
BINFMT = Path("/proc/sys/fs/binfmt_misc")


def cache_root() -> Path:
    return Path(os.environ.get("EDGETUNE_TEST_CACHE", "/var/cache/edgetune-test"))


def recipe_key(arch: str = "arm64", include: tuple[str, ...] = INCLUDE) -> str:
    text = "|".join((RECIPE_VERSION, arch, SUITE, MIRROR, ",".join(include)))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def rootfs_path(arch: str = "arm64", include: tuple[str, ...] = INCLUDE) -> Path:
    return cache_root() / f"{arch}-{SUITE}-{recipe_key(arch, include)}" / "rootfs"


def missing_components() -> list[str]:
    """What this host lacks to build and run the emulated board (empty when ready)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (debootstrap, chroot, mounts)")
    for tool, package in (("debootstrap", "debootstrap"), ("qemu-aarch64-static", "qemu-user-static"),
                          ("qemu-arm-static", "qemu-user-static"),
                          ("dpkg-deb", "dpkg"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (Debian package {package})")
    return missing


#: Debian architecture -> (qemu binfmt entry, ``uname -m`` inside the rootfs)
EMULATED = {"arm64": ("qemu-aarch64", "aarch64"), "armhf": ("qemu-arm", "armv7l")}


def ensure_binfmt(arch: str = "arm64") -> None:
    """Make sure the architecture's ELF files run through qemu (mount binfmt_misc, enable the entry)."""
    name = EMULATED[arch][0]
    if not (BINFMT / "register").exists():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], check=False)
    entry = BINFMT / name
    if not entry.exists() or "enabled" not in entry.read_text():
        if shutil.which("update-binfmts"):
            subprocess.run(["update-binfmts", "--enable", name], check=False, capture_output=True)
    if not entry.exists() or "enabled" not in entry.read_text():
        raise RuntimeError(
            f"binfmt_misc has no enabled {name} entry; run: "
            f"mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && update-binfmts --enable {name}"
        )
    if "F" not in entry.read_text().split("flags:", 1)[-1].splitlines()[0]:
        raise RuntimeError(f"the {name} binfmt entry lacks the F flag (needed inside a chroot)")


def build_rootfs(log=print, arch: str = "arm64", include: tuple[str, ...] = INCLUDE) -> Path:
    """The cached rootfs, built first if needed (about 30 s with a near mirror).

    ``arch="amd64", include=()`` gives a native minimal Debian without python3:
    the "board without python3" of the failure tests.
    """
    if arch in EMULATED:
        ensure_binfmt(arch)
    target = rootfs_path(arch, include)
    done = target.parent / "complete"
    if done.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # test files run in parallel (pytest-xdist): one process builds, the others wait for it and reuse it
    with open(target.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return target
        return _build_rootfs(target, done, log, arch, include)


def _build_rootfs(target: Path, done: Path, log, arch: str, include: tuple[str, ...]) -> Path:
    staging = target.parent / "staging"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    started = time.monotonic()
    log(f"{arch} rootfs: debootstrap --foreign {SUITE} into {staging}")
    subprocess.run(
        ["debootstrap", "--foreign", f"--arch={arch}", "--variant=minbase",
         *([f"--include={','.join(include)}"] if include else []), SUITE, str(staging), MIRROR],
        check=True, stdout=subprocess.DEVNULL,
    )
    # The second stage (dpkg --configure under emulation) is slow and needs
    # more than we use: unpacking every downloaded package is enough to run
    # python3 and a shell.
    debs = sorted((staging / "var/cache/apt/archives").glob("*.deb"))
    log(f"{arch} rootfs: unpacking {len(debs)} packages")
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True)
    for deb in debs:
        deb.unlink()
    etc = staging / "etc"
    if not (etc / "passwd").exists() or "root:" not in (etc / "passwd").read_text():
        (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
        (etc / "group").write_text("root:x:0:\n")
    (staging / "root").mkdir(mode=0o700, exist_ok=True)
    (staging / "tmp").chmod(0o1777)
    # sshd's ChrootDirectory wants every path component root-owned and not writable by others
    os.chmod(staging, 0o755)
    expected = {"amd64": "x86_64", **{a: machine for a, (_, machine) in EMULATED.items()}}.get(arch, arch)
    check = subprocess.run(["chroot", str(staging), "/bin/sh", "-c", "uname -m"], capture_output=True, text=True)
    if check.returncode != 0 or check.stdout.strip() != expected:
        raise RuntimeError(f"the {arch} rootfs does not run /bin/sh: {check.stderr.strip() or check.stdout.strip()}")
    if "python3" in include:
        check = subprocess.run(["chroot", str(staging), "/usr/bin/python3", "-c", "import venv"],
                               capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"the {arch} rootfs does not run python3: {check.stderr.strip()}")
    staging.rename(target)
    done.write_text(f"built in {time.monotonic() - started:.0f} s\n")
    log(f"{arch} rootfs: ready in {time.monotonic() - started:.0f} s at {target}")
    return target


if __name__ == "__main__":
    missing = missing_components()
    if missing:
        sys.exit("missing: " + ", ".join(missing))
    print(build_rootfs())
    print(build_rootfs(arch="amd64", include=()))
    print(build_rootfs(arch="armhf", include=()))
