"""Tuning: the pipeline that ``edgetune tune`` and every benchmark run.

* :mod:`.pipeline`: :class:`TuningPipeline` builds the MetaSchedule components
  from a profile and :class:`TuneOptions`; :func:`run_tune` runs it;
  :class:`Components` lets a caller pass in the one component it compares.
* :mod:`.summary`: :class:`TuneSummary`, the typed result (``summary.json``).
* :mod:`.progress`: progress state and the :class:`ProgressSink` the CLI renders.
* :mod:`.callbacks`, :mod:`.cache`, :mod:`.signals`, :mod:`.settings`,
  :mod:`.evaluate`: the pieces the pipeline is made of.
"""

from edgetune.tuning.cache import CandidateCache
from edgetune.tuning.evaluate import ARTIFACT_NAME, UNTUNED_ARTIFACT_NAME
from edgetune.tuning.pipeline import Components, TaskPlan, TuneOptions, TuningPipeline, run_tune
from edgetune.tuning.progress import CurvePoint, ProgressSink, TaskProgress, TuneProgress
from edgetune.tuning.settings import MEASUREMENT_LOG
from edgetune.tuning.summary import SUMMARY_NAME, EndToEnd, TaskResult, TuneSummary

__all__ = [
    "ARTIFACT_NAME",
    "MEASUREMENT_LOG",
    "SUMMARY_NAME",
    "UNTUNED_ARTIFACT_NAME",
    "CandidateCache",
    "Components",
    "CurvePoint",
    "EndToEnd",
    "ProgressSink",
    "TaskPlan",
    "TaskProgress",
    "TaskResult",
    "TuneOptions",
    "TuneProgress",
    "TuneSummary",
    "TuningPipeline",
    "run_tune",
]
