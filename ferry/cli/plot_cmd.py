"""``ferry plot JOB``: a job's metrics as a PNG chart, or as sparklines in the terminal."""

from __future__ import annotations

import argparse
from typing import Any

from ferry.cli._common import add_command, eprint, find_job, store_now
from ferry.errors import BackendNotInstalled, UsageError, install_hint
from ferry.telemetry import is_telemetry

EXAMPLE = """\
  ferry plot digits-cnn-3f9a                      # sparklines here
  ferry plot dig -o curves.png                    # loss, accuracy, GPU or CPU use
  ferry plot dig loss val_acc gpu0/util_percent -o run.png
"""

_BARS = "▁▂▃▄▅▆▇█"
MAX_PANELS = 6
# metrics Ferry derives for its own bookkeeping, not measured: the total in epoch=3/30
BOOKKEEPING = frozenset({"steps_total"})


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "plot",
        help="chart a job's metrics (PNG, or in the terminal)",
        description="Chart a job's metrics against the step (or time). With -o, a PNG "
        "(matplotlib); without, one sparkline per metric in the terminal. By default: what "
        "the script reported, then GPU utilisation (or CPU use without GPUs). A metric with "
        "a single value (a final test_accuracy) is shown as a number beside the charts.",
        example=EXAMPLE,
    )
    p.add_argument("job", help="job id or unique prefix")
    p.add_argument(
        "metrics", nargs="*", metavar="METRIC", help="metrics to chart (default: see above)"
    )
    p.add_argument("-o", "--output", metavar="FILE.png", help="write a PNG chart here")
    p.set_defaults(handler=plot)


def default_metrics(names: list[str]) -> list[str]:
    """The script's own metrics first, then GPU utilisation, else CPU use (never what Ferry
    derives for its bookkeeping, such as ``steps_total``)."""
    own = [n for n in names if not is_telemetry(n) and n not in BOOKKEEPING]
    gpus = [n for n in names if n.startswith("gpu") and n.endswith("/util_percent")]
    return (own + (gpus or [n for n in names if n == "sys/cpu_percent"]))[:MAX_PANELS]


def sparkline(values: list[float], width: int = 60) -> str:
    """``'▁▂▄█▆'``: the series squeezed into ``width`` characters."""
    if not any(v == v for v in values):
        return ""
    if len(values) > width:  # average into width buckets
        step = len(values) / width
        values = [
            sum(chunk) / len(chunk)
            for i in range(width)
            if (chunk := [v for v in values[int(i * step) : int((i + 1) * step)] if v == v])
        ]
    finite = [v for v in values if v == v]
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    return "".join(
        _BARS[min(len(_BARS) - 1, int((v - low) / span * len(_BARS)))] if v == v else " "
        for v in values
    )


def plot(args: argparse.Namespace) -> int:
    store = store_now()
    job = find_job(store, args.job)
    summaries = {s.name: s for s in store.metric_summaries(job.id)}
    known = list(summaries)
    if not known:
        eprint(f"ferry: {job.id} has no metrics to chart yet")
        return 0
    wanted = args.metrics or default_metrics(known)
    missing = [m for m in wanted if m not in known]
    if missing:
        raise UsageError(f"{job.id} has no metric {missing[0]!r}", f"it has: {', '.join(known)}")
    # one point makes no line: such a metric (a final test_accuracy) is shown as its value
    single = {n: summaries[n].last for n in wanted if summaries[n].points == 1}
    series = {n: store.metric_series(job.id, n) for n in wanted if n not in single}
    if not args.output:
        width = max(len(n) for n in wanted)
        for name, points in series.items():
            values = [v if v is not None else float("nan") for _, _, v in points]
            finite = [v for v in values if v == v]
            last = f"{finite[-1]:.4g}" if finite else "nan"
            print(f"{name:<{width}}  {sparkline(values)}  {last}")
        for name, value in single.items():
            print(f"{name:<{width}}  {_number(value)}  (a single value)")
        return 0
    panels = {name: {name: points} for name, points in series.items()}
    _figure(job.id, panels, args.output, single)
    eprint(f"ferry: wrote {args.output}")
    return 0


Series = list[tuple[float, int | None, float | None]]


def _number(value: float | None) -> str:
    return "nan" if value is None else f"{value:.4g}"


def new_figure(width: float, height: float) -> Any:
    """A matplotlib figure drawn off-screen (inches), or a clear error without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise BackendNotInstalled("charts need matplotlib", install_hint("plot")) from None
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _figure(
    title: str,
    panels: dict[str, dict[str, Series]],
    path: str,
    values: dict[str, float | None] | None = None,
) -> None:
    """One panel per metric, one line per series in it (a job, when comparing); ``values``
    (metrics with a single value) are written as numbers in a column beside the panels."""
    values = values or {}
    rows = max(len(panels), 1)
    columns = (1 if panels else 0) + (1 if values else 0)
    widths = ([9.0] if panels else []) + ([3.0] if values else [])
    figure = new_figure(sum(widths), 2.6 * rows if panels else 0.6 + 0.5 * len(values))
    grid = figure.add_gridspec(rows, columns, width_ratios=widths)
    if values:
        box = figure.add_subplot(grid[:, -1])
        box.axis("off")
        box.set_title("single values", loc="left", fontsize=10)
        text = "\n".join(f"{name}\n  {_number(value)}" for name, value in values.items())
        box.text(0.0, 1.0, text, va="top", ha="left", fontsize=10, transform=box.transAxes)
    for i, (name, lines) in enumerate(panels.items()):
        axes = figure.add_subplot(grid[i, 0])
        by_step = all(step is not None for points in lines.values() for _, step, _ in points)
        span = max((p[-1][0] - p[0][0] for p in lines.values() if p), default=0.0)
        unit, seconds = ("seconds", 1.0) if span < 120 else ("minutes", 60.0)
        for k, (label, points) in enumerate(lines.items()):
            start = points[0][0] if points else 0.0
            xs = [
                float(step) if by_step and step is not None else (t - start) / seconds
                for t, step, _ in points
            ]
            ys = [float("nan") if v is None else v for _, _, v in points]
            few = (
                len(points) < 50
            )  # mark the points when there are few (one is otherwise invisible)
            color = f"C{(i if len(lines) == 1 else k) % 10}"
            axes.plot(
                xs,
                ys,
                linewidth=1.4,
                color=color,
                marker="o" if few else None,
                markersize=3,
                label=label,
            )
        if len(lines) > 1:
            axes.legend(fontsize=8)
        axes.set_title(name, loc="left", fontsize=10)
        axes.set_xlabel("step" if by_step else unit)
        axes.grid(alpha=0.3)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
