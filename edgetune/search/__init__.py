"""Search: which candidates to try next (cost model, search strategy, task scheduler).

Each piece is a stock MetaSchedule component chosen by name from the profile's
``[tuning]`` table; the names are validated by :mod:`edgetune.profile`. The
exports are imported on first use (:mod:`edgetune.common.lazy`).
"""

from edgetune.common.lazy import lazy_exports

_EXPORTS = {
    "make_cost_model": "factory",
    "make_search_strategy": "factory",
    "make_task_scheduler": "factory",
    "LearningCurveBelief": "scheduler",
    "SlotBandit": "scheduler",
    "UCBTaskScheduler": "scheduler",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
