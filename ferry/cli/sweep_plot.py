"""``ferry sweep plot SWEEP`` (of ``sweep_cmd``): how a sweep went, as a PNG (matplotlib)
or in the terminal.

The chart has the optimization history on top (each finished trial's objective by trial
number, the pruned ones where they were cut, and the best so far), and below it which
parameters mattered (Optuna's PED-ANOVA importances, which need no more than Optuna and
SciPy) beside parallel coordinates (each finished trial as a line through its values,
coloured by its objective, the best drawn last and thickest).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ferry.sweeps.params import Param
    from ferry.sweeps.records import Sweep


def history(sweep: Sweep, study: Any) -> dict[str, list[tuple[int, float]]]:
    """``finished``, ``pruned`` (the last value each reported) and ``best`` (so far, at
    each finished trial): (trial number, objective) in trial order."""
    better = max if sweep.search.objective.direction == "maximize" else min
    out: dict[str, list[tuple[int, float]]] = {"finished": [], "pruned": [], "best": []}
    best: float | None = None
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if trial.state.name == "COMPLETE" and trial.value is not None:
            value = float(trial.value)
            out["finished"].append((trial.number, value))
            best = value if best is None else better(best, value)
            out["best"].append((trial.number, best))
        elif trial.state.name == "PRUNED" and trial.intermediate_values:
            last = trial.intermediate_values[max(trial.intermediate_values)]
            out["pruned"].append((trial.number, float(last)))
    return out


def importances(study: Any) -> dict[str, float]:
    """How much each parameter that varied mattered to the objective (shares summing to
    1), or {} where there is too little to say (fewer than three finished trials, fewer
    than two parameters that varied). A parameter drawn on a condition is judged by the
    trials that drew it: PED-ANOVA (Optuna 5) splits the trials by whether a parameter
    was drawn, and the trials without it say nothing of its values."""
    import warnings

    import optuna

    finished = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    names = {name for t in finished for name in t.params}
    # (over the trials that drew it: a parameter drawn on a condition is absent elsewhere)
    varied = {n for n in names if len({repr(t.params[n]) for t in finished if n in t.params}) > 1}
    if len(finished) < 3 or len(varied) < 2:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (Optuna marks the evaluator experimental)
            found = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
            )
    except (ValueError, RuntimeError, ZeroDivisionError):  # (parameters that never varied)
        return {}
    return {str(k): float(v) for k, v in found.items() if k in varied}


def _position(param: Param, value: Any) -> float:
    """Where a value sits on its parameter's axis, from 0 (low) to 1 (high)."""
    if param.kind == "choice":
        index = next((i for i, c in enumerate(param.choices) if c == value), 0)
        return index / max(len(param.choices) - 1, 1)
    low, high, v = float(param.low), float(param.high), float(value)
    if param.kind in ("loguniform", "logint") and low > 0:
        low, high, v = math.log(low), math.log(high), math.log(max(v, 1e-300))
    return 0.0 if high == low else min(max((v - low) / (high - low), 0.0), 1.0)


def _ends(param: Param) -> tuple[str, str]:
    if param.kind == "choice":
        return str(param.choices[0]), str(param.choices[-1])
    return f"{param.low:g}", f"{param.high:g}"


def draw(sweep: Sweep, study: Any, path: str) -> None:
    """Write the sweep's chart (see the module's docstring) to ``path`` as a PNG."""
    from ferry.cli.plot_cmd import new_figure

    seen = history(sweep, study)
    mattered = importances(study)
    objective = sweep.search.objective
    figure = new_figure(11.0, 8.0)
    grid = figure.add_gridspec(2, 2 if mattered else 1, width_ratios=[1, 2] if mattered else [1])

    axes = figure.add_subplot(grid[0, :])
    if seen["finished"]:
        xs, ys = zip(*seen["finished"], strict=True)
        axes.plot(xs, ys, "o", color="C0", markersize=4, label="finished")
    if seen["pruned"]:
        xs, ys = zip(*seen["pruned"], strict=True)
        axes.plot(xs, ys, "x", color="0.55", markersize=5, label="pruned (last report)")
    if seen["best"]:
        xs, ys = zip(*seen["best"], strict=True)
        axes.step(xs, ys, where="post", color="C3", linewidth=1.6, label="best so far")
    values = [v for key in ("finished", "pruned") for _, v in seen[key] if math.isfinite(v)]
    if values and min(values) > 0 and max(values) / min(values) > 1000:
        axes.set_yscale("log")
    axes.set_title("optimization history", loc="left", fontsize=10)
    axes.set_xlabel("trial")
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.set_ylabel(f"{objective.metric} ({objective.short})")
    axes.grid(alpha=0.3)
    if values:
        axes.legend(fontsize=8)

    if mattered:
        bars = figure.add_subplot(grid[1, 0])
        names = list(reversed(mattered))  # (the one that mattered most on top)
        bars.barh(names, [mattered[n] for n in names], color="C0")
        bars.set_xlim(0, 1)
        bars.set_title("parameter importance", loc="left", fontsize=10)
        bars.grid(alpha=0.3, axis="x")

    lines = figure.add_subplot(grid[1, -1])
    _parallel(lines, sweep, study)
    figure.suptitle(f"sweep {sweep.id}")
    figure.savefig(path, dpi=110)


OFF = -0.3  # where a trial that did not draw a parameter (its condition false) crosses its axis


def _parallel(axes: Any, sweep: Sweep, study: Any) -> None:
    """Parallel coordinates of the finished trials on ``axes``. A parameter drawn on a
    condition has a place of its own below its axis, ``not drawn``, for the trials whose
    condition was false."""
    from matplotlib import colormaps

    params = [p for p in sweep.search.params if not (p.kind == "choice" and len(p.choices) < 2)]
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    axes.set_title("parallel coordinates (finished trials)", loc="left", fontsize=10)
    count = len(params) + 1
    conditional = any(p.condition is not None for p in params)
    axes.set_xlim(-0.3, count - 0.7)
    axes.set_ylim(OFF - 0.12 if conditional else -0.14, 1.14)
    axes.set_yticks([])
    for side in ("top", "right", "bottom", "left"):
        axes.spines[side].set_visible(False)
    labels = [p.name for p in params] + [sweep.search.objective.metric]
    axes.set_xticks(range(count), labels, fontsize=8)
    axes.vlines(range(count), 0, 1, color="0.3", linewidth=0.8)
    for x, param in enumerate(params):
        bottom, top = _ends(param)
        axes.text(x, -0.03, bottom, ha="center", va="top", fontsize=7)
        axes.text(x, 1.03, top, ha="center", va="bottom", fontsize=7)
        if param.condition is not None:
            axes.plot([x], [OFF], "o", color="0.3", markersize=3)
            axes.text(x, OFF - 0.04, "not drawn", ha="center", va="top", fontsize=7)
    values = [float(t.value) for t in finished if t.value is not None]
    if not values:
        return
    low, high = min(values), max(values)
    axes.text(count - 1, -0.03, f"{low:.4g}", ha="center", va="top", fontsize=7)
    axes.text(count - 1, 1.03, f"{high:.4g}", ha="center", va="bottom", fontsize=7)
    worse_first = sorted(
        (t for t in finished if t.value is not None),
        key=lambda t: float(t.value),
        reverse=sweep.search.objective.direction == "minimize",
    )
    shades = colormaps["viridis"]
    for rank, trial in enumerate(worse_first):
        share = rank / max(len(worse_first) - 1, 1)  # 0: the worst, 1: the best
        ys = [_position(p, trial.params[p.name]) if p.name in trial.params else OFF for p in params]
        ys.append(0.5 if high == low else (float(trial.value) - low) / (high - low))
        best = rank == len(worse_first) - 1
        axes.plot(
            range(count), ys, color=shades(share), linewidth=2.4 if best else 1.0,
            alpha=1.0 if best else 0.7,
        )  # fmt: skip


def sparkline_report(sweep: Sweep, study: Any) -> list[str]:
    """The terminal's version: the best so far as a sparkline, and the importances as bars."""
    from ferry.cli.plot_cmd import sparkline

    seen = history(sweep, study)
    lines = []
    metric = sweep.search.objective.describe()
    if seen["best"]:
        values = [v for _, v in seen["best"]]
        lines.append(f"best {metric} by trial  {sparkline(values)}  {values[-1]:.6g}")
    done = len(seen["finished"])
    lines.append(f"{done} finished, {len(seen['pruned'])} pruned")
    mattered = importances(study)
    if mattered:
        width = max(len(n) for n in mattered)
        lines.append("parameter importance:")
        for name, share in mattered.items():
            lines.append(f"  {name:<{width}}  {'█' * round(share * 30):<30}  {share:.2f}")
    return lines
