"""The integer dot-product instruction a target's int8 kernels are tensorized with.

int8 convolutions and dense layers accumulate ``int8 x int8 -> int32``; each CPU
family has one instruction that does four such products per lane and adds them:

* ``avx512-vnni``: ``vpdpbusd`` on 512-bit registers (Cascade Lake and later, Zen 4/5);
  it multiplies *unsigned* activations by signed weights, so the graph shifts
  activations by +128 (:mod:`edgetune.tasks.int8`);
* ``avx-vnni``: the same instruction on 256-bit registers (Alder Lake's VEX form);
* ``sdot``: Armv8.2's dot product (Cortex-A55/A76: Raspberry Pi 5, RK3588), ``+dotprod``;
* ``neon``: plain NEON (Cortex-A53/A72: Pi 3/4, RK3399), ``smull`` + ``sadalp``/``addp``;
* ``none``: anything else; int8 kernels get ordinary (auto-vectorized) schedules.

It is read from the CPU features LLVM reports for the target's ``mcpu``/``mattr``
(for ``mcpu = "native"`` the profile has already put this host's CPU name there), not
from the CPU's name, like :mod:`edgetune.common.cpu_family`.
"""

from __future__ import annotations

from typing import Any

#: the instructions, best first, with the LLVM features each needs and the architecture it belongs to
INSTRUCTIONS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("avx512-vnni", "x86_64", frozenset({"avx512vnni", "avx512bw"})),
    ("avx-vnni", "x86_64", frozenset({"avxvnni"})),
    ("sdot", "aarch64", frozenset({"neon", "dotprod"})),
    ("neon", "aarch64", frozenset({"neon"})),
)
NONE = "none"
#: every value :func:`int8_instruction` returns
INSTRUCTION_NAMES: tuple[str, ...] = tuple(name for name, _, _ in INSTRUCTIONS) + (NONE,)
#: instructions whose multiply takes unsigned activations (the graph shifts int8 activations to uint8 for them)
UNSIGNED_ACTIVATIONS = frozenset({"avx512-vnni", "avx-vnni"})


def int8_instruction(target: Any) -> str:
    """The dot-product instruction of ``target`` (a ``tvm.target.Target``): one of :data:`INSTRUCTION_NAMES`."""
    if str(target.kind.name) != "llvm":
        return NONE
    from .cpu_family import _arch_of, _llvm_features

    arch = _arch_of(str(target.attrs.get("mtriple", "") or ""))
    features = _llvm_features(target)
    for name, name_arch, required in INSTRUCTIONS:
        if name_arch == arch and required <= features:
            return name
    return NONE


def wants_unsigned_activations(instruction: str) -> bool:
    """Whether ``instruction`` multiplies uint8 activations by int8 weights (x86's VNNI) rather than int8 by int8."""
    return instruction in UNSIGNED_ACTIVATIONS


#: int32 sums one instruction call produces: output channels per weight tile (each tile x 4 input channels)
OUTPUT_LANES: dict[str, int] = {"avx512-vnni": 16, "avx-vnni": 8, "sdot": 4, "neon": 4}
