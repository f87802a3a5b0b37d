"""``ferry plot JOB``: a job's metrics as a PNG chart, or as sparklines in the terminal."""

from __future__ import annotations

import argparse
from typing import Any

from ferry.cli._common import add_command, eprint, find_job, store_now
from ferry.errors import BackendNotInstalled, UsageError
from ferry.telemetry import is_telemetry

EXAMPLE = """\
  ferry plot digits-cnn-3f9a                      # sparklines here
  ferry plot dig -o curves.png                    # loss, accuracy, GPU or CPU use
  ferry plot dig loss val_acc gpu0/util_percent -o run.png
"""

_BARS = "▁▂▃▄▅▆▇█"
MAX_PANELS = 6


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "plot",
        help="chart a job's metrics (PNG, or in the terminal)",
        description="Chart a job's metrics against the step (or time). With -o, a PNG "
        "(matplotlib); without, one sparkline per metric in the terminal. By default: what "
        "the script reported, then GPU utilisation (or CPU use without GPUs).",
        example=EXAMPLE,
    )
    p.add_argument("job", help="job id or unique prefix")
    p.add_argument(
        "metrics", nargs="*", metavar="METRIC", help="metrics to chart (default: see above)"
    )
    p.add_argument("-o", "--output", metavar="FILE.png", help="write a PNG chart here")
    p.set_defaults(handler=plot)


def default_metrics(names: list[str]) -> list[str]:
    """The script's own metrics first, then GPU utilisation, else CPU use."""
    own = [n for n in names if not is_telemetry(n)]
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
    known = [s.name for s in store.metric_summaries(job.id)]
    if not known:
        eprint(f"ferry: {job.id} has no metrics to chart yet")
        return 0
    wanted = args.metrics or default_metrics(known)
    missing = [m for m in wanted if m not in known]
    if missing:
        raise UsageError(f"{job.id} has no metric {missing[0]!r}", f"it has: {', '.join(known)}")
    series = {name: store.metric_series(job.id, name) for name in wanted}
    if not args.output:
        width = max(len(n) for n in wanted)
        for name, points in series.items():
            values = [v if v is not None else float("nan") for _, _, v in points]
            finite = [v for v in values if v == v]
            last = f"{finite[-1]:.4g}" if finite else "nan"
            print(f"{name:<{width}}  {sparkline(values)}  {last}")
        return 0
    _png(job.id, series, args.output)
    eprint(f"ferry: wrote {args.output}")
    return 0


Series = list[tuple[float, int | None, float | None]]


def _png(job_id: str, series: dict[str, Series], path: str) -> None:
    _figure(job_id, {name: {name: points} for name, points in series.items()}, path)


def new_figure(width: float, height: float) -> Any:
    """A matplotlib figure drawn off-screen (inches), or a clear error without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise BackendNotInstalled("charts need matplotlib", "pip install 'ferry[plot]'") from None
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _figure(title: str, panels: dict[str, dict[str, Series]], path: str) -> None:
    """One panel per metric, one line per series in it (a job, when comparing)."""
    figure = new_figure(9, 2.6 * len(panels))
    for i, (name, lines) in enumerate(panels.items(), start=1):
        axes = figure.add_subplot(len(panels), 1, i)
        by_step = all(step is not None for points in lines.values() for _, step, _ in points)
        for k, (label, points) in enumerate(lines.items()):
            start = points[0][0] if points else 0.0
            xs = [
                float(step) if by_step and step is not None else (t - start) / 60
                for t, step, _ in points
            ]
            ys = [float("nan") if v is None else v for _, _, v in points]
            few = (
                len(points) < 50
            )  # mark the points when there are few (one is otherwise invisible)
            color = f"C{(i - 1 if len(lines) == 1 else k) % 10}"
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
        axes.set_xlabel("step" if by_step else "minutes")
        axes.grid(alpha=0.3)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
