"""Search: which candidates to try next (cost model, search strategy, task scheduler).

Each piece is a stock MetaSchedule component chosen by name from the profile's
``[tuning]`` table; the names are validated by :mod:`edgetune.profile`.
"""

from edgetune.search.factory import make_cost_model, make_search_strategy, make_task_scheduler
from edgetune.search.scheduler import LearningCurveBelief, SlotBandit, UCBTaskScheduler

__all__ = ["LearningCurveBelief", "SlotBandit", "UCBTaskScheduler", "make_cost_model", "make_search_strategy", "make_task_scheduler"]
