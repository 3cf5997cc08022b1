"""Where one candidate's build goes, and the two candidate links side by side (issue 55, ``build.candidate_link``).

Replays the first schedule of the first N workloads of this host's shipped library (the same
scheduled modules the builder compiles) and, for each, times in this process: TIR lowering with
LLVM code generation (``tvm.compile``), object emission, and the link through the compiler
(``driver``) and through its own ``ld`` (``direct``, the product's, via the builder's own
``shared_library_linker``). It then checks that both links put every instruction at the same
address (``objdump -d``: a kernel's speed depends on where its loops fall) and, with
``--time-kernels``, times each kernel of both libraries in one process, alternating, 6 rounds.
Prints medians in milliseconds.

    python benchmarks/build_cost.py --schedules 40
    python benchmarks/build_cost.py --schedules 24 --time-kernels
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _instructions(path: str) -> list[tuple[str, str]]:
    """(address, mnemonic) of every instruction: where the code lies, not the GOT offsets its operands name."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True,
                             check=True).stdout
    found = []
    for line in listing.splitlines():
        address, _, rest = line.partition(":\t")
        if rest and address.strip() and all(c in "0123456789abcdef" for c in address.strip()):
            found.append((address.strip(), rest.split()[0] if rest.split() else ""))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=40, help="library workloads to build (first schedule each)")
    parser.add_argument("--time-kernels", action="store_true", help="also time both libraries' kernels")
    args = parser.parse_args()

    import numpy as np
    import tvm
    from tvm.s_tir import Schedule, Trace
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from edgetune.builder.builder import shared_library_linker
    from edgetune.profile import load_profile
    from edgetune.schedules.use import choose_library

    target = load_profile("host").tvm_target()
    choice = choose_library("auto", target)
    if choice.library is None:
        print(choice.message, file=sys.stderr)
        return 1
    library = choice.library
    print(f"load average {os.getloadavg()[0]:.2f}; {choice.message}; target {target.attrs.get('mcpu', '')}")
    phases: dict[str, list[float]] = {"tvm.compile": [], "object": [], "link driver": [], "link direct": []}
    same, built, ratios = 0, 0, []
    work = tempfile.mkdtemp(prefix="build-cost-")
    for index, workload in enumerate(library.workloads[: args.schedules]):
        sch = Schedule(workload.mod, debug_mask="none")
        Trace.apply_json_to_schedule(workload.schedules[0].trace_json, sch)
        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod)
        started = time.perf_counter()
        executable = tvm.compile(mod, target=target)
        phases["tvm.compile"].append(time.perf_counter() - started)
        obj = os.path.join(work, f"{index}.o")
        started = time.perf_counter()
        executable.mod.write_to_file(obj)
        phases["object"].append(time.perf_counter() - started)
        libraries = {}
        for link in ("driver", "direct"):
            libraries[link] = os.path.join(work, f"{index}-{link}.so")
            fcompile = shared_library_linker("", (), direct=link == "direct")
            started = time.perf_counter()
            fcompile(libraries[link], [obj])
            phases[f"link {link}"].append(time.perf_counter() - started)
        built += 1
        same += _instructions(libraries["direct"]) == _instructions(libraries["driver"])
        if args.time_kernels:
            rng = np.random.default_rng(0)
            inputs = [tvm.runtime.tensor(rng.random([int(d) for d in info.shape]).astype(info.dtype))
                      for info in ArgInfo.from_prim_func(mod["main"])]
            loaded = {link: tvm.runtime.load_module(name) for link, name in libraries.items()}
            times: dict[str, list[float]] = {"driver": [], "direct": []}
            for round_ in range(6):
                for link in ("direct", "driver") if round_ % 2 == 0 else ("driver", "direct"):
                    evaluator = loaded[link].time_evaluator("main", tvm.cpu(), number=20, repeat=3, min_repeat_ms=20)
                    times[link].append(min(evaluator(*inputs).results))
            ratios.append(statistics.median(times["direct"]) / statistics.median(times["driver"]))
    for name, values in phases.items():
        print(f"{name:12s} median {statistics.median(values) * 1e3:6.1f} ms, mean {statistics.mean(values) * 1e3:6.1f} ms")
    print(f"object + link: driver {statistics.median([o + l for o, l in zip(phases['object'], phases['link driver'])]) * 1e3:.1f} ms, "
          f"direct {statistics.median([o + l for o, l in zip(phases['object'], phases['link direct'])]) * 1e3:.1f} ms (medians)")
    print(f"every instruction at the driver's address: {same} of {built} libraries")
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"kernel time direct / driver: geomean {geomean:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0 if same == built else 1


if __name__ == "__main__":
    sys.exit(main())
