"""Resume: serve already-measured candidates from the history instead of building and measuring them again."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tvm.ir import IRModule
    from tvm.target import Target
    
    from .components import TuningHistory


class CandidateCache:
    """Scheduled-module hash -> stored run times, for the tasks of this run.

    Built from the history before tuning: each stored trace is replayed on its
    workload and the resulting module hashed exactly as the builder hashes the
    candidates it is asked to build. A hit is neither built nor measured.
    """

    def __init__(self) -> None:
        self._run_secs: dict[str, list[float]] = {}
        self._defaults: dict[str, list[float]] = {}  # workload hash -> its default schedule's run times

    @staticmethod
    def key(mod: IRModule) -> str:
        import tvm_ffi

        return str(tvm_ffi.structural_hash(mod))

    def add_history(self, history: TuningHistory, workload_mod: IRModule, target: Target) -> int:
        """Index every record of ``workload_mod`` on ``target``; return how many."""
        from tvm.s_tir import Schedule

        workload = history.commit_workload(workload_mod)
        records = history.for_target(target).get_top_k(workload, 1 << 30)
        from ..search.default_schedule import is_default_trace

        for record in records:
            if is_default_trace(record.trace):
                # not a search candidate: a searched module equal to the untuned one is another record
                self._defaults[self.key(workload.mod)] = [float(x) for x in record.run_secs]
                continue
            sch = Schedule(workload.mod)
            try:
                record.trace.apply_to_schedule(sch, remove_postproc=False)
            except Exception:  # a trace from another TVM version: just measure again
                continue
            self._run_secs[self.key(sch.mod)] = [float(x) for x in record.run_secs]
        return len(records)

    def default_run_secs(self, workload_mod: IRModule) -> list[float] | None:
        """Stored run times of the workload's default schedule (the untuned code); None if never measured."""
        return self._defaults.get(self.key(workload_mod))

    def lookup_mod(self, mod: IRModule) -> str | None:
        key = self.key(mod)
        return key if key in self._run_secs else None

    def add(self, key: str, run_secs: list[float]) -> None:
        """A result found during the run (another process measured the candidate)."""
        self._run_secs[key] = [float(x) for x in run_secs]

    def lookup_key(self, key: str) -> list[float] | None:
        return self._run_secs.get(key)

    def __len__(self) -> int:
        return len(self._run_secs)
