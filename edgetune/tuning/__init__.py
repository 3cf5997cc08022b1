"""Tuning: the pipeline that ``edgetune tune`` and every benchmark run.

* :mod:`.pipeline`: :class:`TuningPipeline` runs one tune's stages in order from a
  profile and :class:`TuneOptions`; :func:`run_tune` runs it;
  :class:`Components` lets a caller pass in the one component it compares.
* The stages, each handing a frozen record on: :mod:`.inputs` (options, checked
  inputs, the board), :mod:`.plan` (:class:`TaskPlan` and what is measured before
  and sized for the search), :mod:`.session` (the components, ``TuneSession``),
  :mod:`.library_phase` (default and library schedules measured first),
  :mod:`.run` (the one ``ms.tune_tasks`` call, retiming), :mod:`.summarize`;
  :mod:`.components` says what the run asks of each component.
* :mod:`.summary`: :class:`TuneSummary`, the typed result (``summary.json``).
* :mod:`.progress`: progress state and the :class:`ProgressSink` the CLI renders.
* :mod:`.callbacks`, :mod:`.cache`, :mod:`.signals`, :mod:`.settings`,
  :mod:`.evaluate`: the pieces the pipeline is made of.

The exports are imported on first use (:mod:`edgetune.common.lazy`), so that the
CLI's progress display imports no TVM before a run starts.
"""

from edgetune.common.lazy import lazy_exports

_EXPORTS = {
    "CandidateCache": "cache",
    "ARTIFACT_NAME": "evaluate",
    "UNTUNED_ARTIFACT_NAME": "evaluate",
    "Components": "components",
    "TaskPlan": "plan",
    "TuneOptions": "inputs",
    "TuningPipeline": "pipeline",
    "run_tune": "pipeline",
    "CurvePoint": "progress",
    "ProgressSink": "progress",
    "TaskProgress": "progress",
    "TuneProgress": "progress",
    "MEASUREMENT_LOG": "settings",
    "SUMMARY_NAME": "summary",
    "EndToEnd": "summary",
    "TaskResult": "summary",
    "TuneSummary": "summary",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
