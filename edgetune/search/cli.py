"""``edgetune db suggest``: per-task-type early-stop and K-means sampling settings read off a history.

Search policy read from the history (:mod:`edgetune.search.suggest`), so it
lives with the search; registered under ``edgetune db`` beside the history's
own maintenance actions (:mod:`edgetune.history.cli`), whose helpers it uses.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import HistoryError
from ..history.cli import DB_HELP, _console, _open, _print_fitting, db_action

#: edgetune.search.suggest.SAMPLING_RECORDS, not imported so that the CLI starts without TVM
_SAMPLING_RECORDS = 64


def add_suggest_command(db_sub: Any) -> None:
    """Add ``suggest`` to the ``edgetune db`` subparsers."""
    _add_suggest_command(db_action(db_sub))


def _add_suggest_command(action: Any) -> None:
    """``suggest``: per-task-type early-stop and sampling settings read off the history."""
    suggest = action(
        "suggest",
        "suggest per-task-type early stop and K-means sampling settings from the history",
        "For each task type (the same operator at any shapes) and target, read off the history at which "
        "measurement each workload found its best, and suggest a per-task trial count covering 90%% of them "
        "with a margin, in whole batches (history-database paper, section IV). For sampling, replay each "
        "workload's first --sampling-records records in windows of --batch (committed order), recompute each "
        "candidate's features from its trace as the K-means sampler does, and find the largest distance ratio "
        "of 0.1, 0.2, 0.3, 0.5 whose sampled subset still holds a candidate within 3%% of the window's best "
        "latency in at least 90%% of the windows; the type gets the smallest over its workloads (0 = off: no "
        "ratio was safe, measure every candidate). `edgetune tune --suggested` applies each task's own type's "
        "settings.",
        "examples:\n  edgetune db suggest --db history.db\n  edgetune db suggest --db history.db --batch 16 --margin 1.5\n"
        "  edgetune db suggest --db history.db --no-sampling\n",
    )
    suggest.add_argument("--db", required=True, metavar="URL", help=DB_HELP)
    suggest.add_argument(
        "--batch", type=int, default=8,
        help="round trial counts up to whole batches of this size, and replay sampling in windows of it (default 8; "
        "use the profile's tuning.num_trials_per_iter)",
    )
    suggest.add_argument("--margin", type=float, default=1.25, help="multiply the 90th percentile by this (default 1.25)")
    suggest.add_argument("--min-trials", type=int, default=8, help="ignore workloads with fewer records (default 8)")
    suggest.add_argument(
        "--sampling-records", type=int, default=_SAMPLING_RECORDS, metavar="N",
        help="replay only the first N records of each workload for the sampling suggestion, to keep this fast "
        "(a second or two per workload on a 2-core host at the default %(default)s)",
    )
    suggest.add_argument("--no-sampling", action="store_true", help="skip the sampling replay (trial counts only)")
    suggest.add_argument("--seed", type=int, default=0, help="K-means seed of the replay (the profile's tuning.seed; default 0)")
    suggest.set_defaults(func=_run_suggest)


def _run_suggest(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .suggest import suggest_settings

    history = _open(args.db, read_only=True)
    try:
        try:
            suggestions = suggest_settings(
                history, batch=args.batch, margin=args.margin, min_trials=args.min_trials,
                sampling=not args.no_sampling, sampling_records=args.sampling_records, seed=args.seed,
            )
        except ValueError as error:
            raise HistoryError(str(error)) from None
        url = history.url
    finally:
        history.close()
    console = _console()
    if not suggestions:
        console.print(f"{url}: no workload has {args.min_trials} or more records yet; nothing to suggest")
        return 0
    title = f"suggested settings per task type in {url}"
    table = Table(title=title)
    for name in ("operator", "target", "workloads", "best found at", "of trials", "max_trials_per_task", "kmeans_distance_ratio"):
        table.add_column(name, max_width=40 if name == "kmeans_distance_ratio" else None)
    for s in suggestions:
        table.add_row(
            "+".join(s.operator), s.target, str(s.workloads), ", ".join(map(str, s.best_found_at)),
            ", ".join(map(str, s.trials)), str(s.max_trials_per_task), _ratio_text(s),
        )
    _print_fitting(console, table, lambda: _narrow_suggest(title, suggestions))
    return 0


def _narrow_suggest(title: str, suggestions: list[Any]) -> Any:
    """``db suggest`` for a narrow terminal: one row per task type, its settings as ``key = value`` lines."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, box=box.SIMPLE_HEAD, show_lines=True, pad_edge=False)
    longest = max(len("+".join(s.operator)) for s in suggestions)
    table.add_column("task type, target, best found at", min_width=min(34, longest), overflow="fold")
    table.add_column("suggested settings")
    for s in suggestions:
        n = s.workloads
        found = ", ".join(f"{at} of {of}" for at, of in zip(s.best_found_at, s.trials))
        operator = Text.assemble(
            ("+".join(s.operator), "bold"), "\n", f"{s.target} · {n} workload{'s' if n != 1 else ''}", "\n",
            (f"best at trial {found}", "dim"),
        )
        settings = Text(f"max_trials_per_task = {s.max_trials_per_task}\nkmeans_distance_ratio = {_ratio_value(s)}")
        if s.kmeans_distance_ratio is not None:
            settings.append(f"\nper workload ratio/windows: {_ratio_each(s)}", style="dim")
        table.add_row(operator, settings)
    return table


def _ratio_text(suggestion) -> str:
    """The sampling column: the type's ratio, and each workload's (windows replayed)."""
    if suggestion.kmeans_distance_ratio is None:
        return "-"
    return f"{_ratio_value(suggestion)} (per workload ratio/windows: {_ratio_each(suggestion)})"


def _ratio_value(suggestion) -> str:
    if suggestion.kmeans_distance_ratio is None:
        return "-"
    return "0 (off)" if suggestion.kmeans_distance_ratio == 0 else f"{suggestion.kmeans_distance_ratio:g}"


def _ratio_each(suggestion) -> str:
    return ", ".join(f"{r:g}/{w}w" for r, w in zip(suggestion.sampling_ratios, suggestion.sampling_windows))
