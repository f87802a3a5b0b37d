"""``ferry sweep``: a hyperparameter search whose trials are Ferry jobs.

``ferry sweep JOB.yaml --param … --trials N --parallel P --objective METRIC:min`` runs
one; ``ferry sweep ls``, ``status SWEEP``, ``best SWEEP`` show them, and ``resume SWEEP``
goes on with one whose driver was stopped or killed."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ferry.cli._common import add_command, whole_number

EXAMPLE = """\
  ferry sweep job.yaml --param lr=loguniform:1e-4:1e-1 --param batch=choice:32,64,128 \\
      --param layers=int:2:6 --trials 40 --parallel 4 --objective val_loss:min
  ferry sweep job.yaml --param classifier=choice:SVC,RandomForest \
      --param 'svc_c=loguniform:1e-10:1e10 if classifier=SVC' \
      --param 'rf_max_depth=int:2:32 if classifier=RandomForest' --objective accuracy:max
  ferry sweep job.yaml --backend ray        # the spec's sweep: section, trials on Ray
  ferry sweep ls
  ferry sweep status digits-sw3f2a
  ferry sweep best digits-sw3f2a --json
  ferry sweep resume digits-sw3f2a
  SWEEP=$(ferry sweep job.yaml --detach) && ferry sweep status "$SWEEP"
  ferry sweep plot digits-sw3f2a -o sweep.png
  ferry cancel digits-sw3f2a
"""
ACTIONS = ("ls", "status", "best", "resume", "plot")


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "sweep",
        help="search hyperparameters: trials as jobs, pruned early, best first",
        description="Search a job's hyperparameters with Optuna. Each trial is an ordinary "
        "job of the spec, on its backend, with the trial's values as hyperparameters; "
        "the objective is a metric the script reports or prints. A trial whose reports "
        "the pruner finds hopeless gets the stop notice and ends PRUNED. The study is "
        "kept in Ferry's home, so a sweep whose driver was stopped goes on with "
        "ferry sweep resume. Parameters: NAME=loguniform:LOW:HIGH, uniform:LOW:HIGH[:STEP], "
        "int:LOW:HIGH[:STEP], logint:LOW:HIGH, choice:A,B,C; one that ends 'if PARAM=VALUE' "
        "(or PARAM=VALUE,VALUE) is drawn, and passed to the job, only in the trials where "
        "the choice PARAM took one of those values. The spec's sweep: section "
        "(params, objective, trials, parallel, sampler, pruner, seed) gives the same, and "
        "flags win. The spec's limits.max_cost caps all its trials together.",
        example=EXAMPLE,
    )
    p.add_argument(
        "target",
        nargs="*",  # (one at least: a spec after a --param is among its words, see _words)
        metavar="SPEC | ls | status SWEEP | best SWEEP | resume SWEEP | plot SWEEP",
        help="a job spec to sweep, or what to do with sweeps",
    )
    p.add_argument(
        "--param",
        action="append",
        nargs="+",  # (a condition unquoted: --param NAME=KIND:ARGS if PARAM=VALUE)
        default=[],
        metavar=("NAME=KIND:ARGS", "if PARAM=VALUE"),
        help="a hyperparameter; with 'if PARAM=VALUE[,VALUE…]', drawn only in the trials "
        "where the choice PARAM took one of the values",
    )
    p.add_argument(
        "--trials", type=whole_number, help="trials in all (20; a grid: every point once)"
    )
    p.add_argument("--parallel", type=whole_number, help="trials at once (1)")
    p.add_argument("--objective", metavar="METRIC:min|max", help="e.g. val_loss:min")
    p.add_argument("--sampler", help="tpe, random, grid, cmaes or qmc (tpe)")
    p.add_argument("--pruner", help="median, hyperband or none (median)")
    p.add_argument("--seed", type=int, help="the sampler's seed, for a search that repeats")
    p.add_argument(
        "--backend", help="where the trials run: local, ray, vertex, sagemaker… (the spec's)"
    )
    p.add_argument(
        "--detach",
        "-d",
        action="store_true",
        help="drive the sweep in the background: print its id and return (also resume)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument(
        "-o", "--output", metavar="FILE.png", help="plot: write a PNG chart here (else text)"
    )
    p.set_defaults(handler=sweep)


def sweep(args: argparse.Namespace) -> int:
    from ferry.errors import UsageError
    from ferry.sweeps.study import require_optuna

    require_optuna()
    args.param, args.target = _words(args.param, args.target)
    if not args.target:
        raise UsageError(
            "ferry sweep needs a spec to sweep, or one of ls, status, best, resume, plot",
            "e.g. ferry sweep job.yaml --param lr=loguniform:1e-4:1e-1 --objective loss:min",
        )
    action, *rest = args.target
    if action == "ls":
        return _ls(args)
    if action in ACTIONS:
        if len(rest) != 1:
            raise UsageError(
                f"ferry sweep {action} takes one sweep id",
                f"e.g. ferry sweep {action} digits-sw3f2a",
            )
        handlers = {"status": _status, "best": _best, "resume": _resume, "plot": _plot}
        return handlers[action](args, rest[0])
    if rest:
        raise UsageError(
            f"ferry sweep takes one spec, not {len(args.target)} words",
            "e.g. ferry sweep job.yaml --param lr=loguniform:1e-4:1e-1 --objective loss:min",
        )
    return _new(args, action)


def _words(params: list[list[str]], targets: list[str]) -> tuple[list[str], list[str]]:
    """Each ``--param`` as one text (``NAME=KIND:ARGS``, and ``if PARAM=VALUE`` when its
    condition came as words of their own), and the targets: a word after a ``--param``
    that is not its condition is one (``ferry sweep --param … job.yaml``)."""
    texts, more = [], []
    for words in params:
        text, rest = words[0], words[1:]
        if len(rest) >= 2 and rest[0] == "if":
            text, rest = f"{text} if {rest[1]}", rest[2:]
        texts.append(text)
        more.extend(rest)
    return texts, [*targets, *more]


def _new(args: argparse.Namespace, path: str) -> int:
    from ferry import config
    from ferry.errors import UsageError
    from ferry.spec import load_spec
    from ferry.spec_sections import SweepSection
    from ferry.sweeps.params import parse_params
    from ferry.sweeps.study import Search, parse_objective

    spec = load_spec(path, {"backend": args.backend} if args.backend else None)
    given = spec.sweep or SweepSection()  # (the spec's sweep: section; flags win)
    flagged = {p.partition("=")[0].strip() for p in args.param}
    params = [f"{k}={v}" for k, v in given.params.items() if k not in flagged] + args.param
    objective = args.objective or given.objective
    if not objective:
        raise UsageError(
            "a sweep needs an objective",
            "e.g. --objective val_loss:min, or objective: val_loss:min in the spec's sweep:",
        )
    seed = args.seed if args.seed is not None else given.seed
    search = Search(
        tuple(parse_params(params)),
        parse_objective(objective),
        args.sampler or given.sampler,
        args.pruner or given.pruner,
        seed,
    )
    from ferry.sweeps.records import create

    grid = search.grid_size()
    trials = args.trials or given.trials or grid or 20
    if grid is not None and trials < grid:
        _say(f"the grid has {grid} points: {trials} of them run (--trials)")
    parallel = args.parallel or given.parallel
    sweep, study = create(spec, search, trials, parallel, config.ferry_home())
    return _drive(args, sweep, study)


def _say(line: str) -> None:
    import sys

    print(f"ferry: {line}", file=sys.stderr, flush=True)


def _resume(args: argparse.Namespace, sweep_id: str) -> int:
    from ferry import config
    from ferry.sweeps.records import load

    sweep, study = load(sweep_id, config.ferry_home())
    return _drive(args, sweep, study, resume=True)


def _drive(args: argparse.Namespace, sweep: Any, study: Any, resume: bool = False) -> int:
    from ferry import config

    if args.detach:
        return _detach(sweep.id)
    from ferry.cli._common import store_now
    from ferry.followers import start
    from ferry.sweeps.driver import Driver
    from ferry.sweeps.records import driving, uncancel

    with driving(sweep.id, config.ferry_home()):
        _ready()
        if resume and uncancel(study):  # (only once no other driver holds it)
            _say(f"sweep {sweep.id} was cancelled: it goes on")
        _say(
            f"sweep {sweep.id}: {sweep.total} trials, {sweep.parallel} at once, objective "
            f"{sweep.search.objective.describe()} (go on with: ferry sweep resume {sweep.id})"
        )
        outcome = Driver(sweep, study, store_now(), start, _say).run()
    if outcome.cancelled:  # (the best so far, if there is one)
        import contextlib

        from ferry.errors import FerryError

        with contextlib.suppress(FerryError):
            _best(args, sweep.id)
        return 130  # (as ferry wait says of a cancelled job)
    shown = _best(args, sweep.id, ended=outcome.stopped)
    return 1 if outcome.stopped else shown


READY = "FERRY_SWEEP_READY_FD"  # a detached driver says on this pipe that it holds the sweep


def _ready() -> None:
    """Tell the ``ferry sweep --detach`` that started this driver that it holds the sweep."""
    import contextlib
    import os

    fd = os.environ.pop(READY, None)
    if fd is not None and fd.isdigit():
        with contextlib.suppress(OSError):  # (it gave up waiting)
            os.write(int(fd), b"1")
            os.close(int(fd))


def _detach(sweep_id: str) -> int:
    """Start ``ferry sweep resume SWEEP`` in a session of its own, writing to the sweep's
    log; print the sweep's id once that driver holds the sweep (or say why it did not)."""
    import os
    import select
    import signal
    import subprocess
    import sys

    from ferry import config
    from ferry.errors import FerryError, UsageError
    from ferry.sweeps.records import driven, log_path

    home = config.ferry_home()
    if driven(sweep_id, home):
        raise UsageError(
            f"sweep {sweep_id} is being driven by another ferry process",
            f"see it with: ferry sweep status {sweep_id}",
        )
    log = log_path(sweep_id, home)
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # (without the working folder on sys.path: a project's yaml.py must not stand in)
    code = (
        "import sys; sys.path.pop(0); from ferry.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    read, write = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", code, "sweep", "resume", sweep_id],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            pass_fds=(write,),
            env={**os.environ, READY: str(write)},
        )
    finally:
        os.close(fd)
        os.close(write)
    try:
        answered, _, _ = select.select([read], [], [], 60)
        said = os.read(read, 1) if answered else b""
    finally:
        os.close(read)
    if said != b"1":  # (it ended, or never got that far)
        if not answered:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        lines = log.read_text(errors="replace").strip().splitlines()
        last = lines[-1].removeprefix("ferry: ") if lines else "it said nothing"
        raise FerryError(
            f"the driver of sweep {sweep_id} did not start: {last}",
            f"see {log}, or drive it here: ferry sweep resume {sweep_id}",
        )
    print(sweep_id)
    _say(
        f"sweep {sweep_id} is driven in the background (log: {log}); "
        f"see it with: ferry sweep status {sweep_id}"
    )
    return 0


def _ls(args: argparse.Namespace) -> int:
    from ferry import config
    from ferry.sweeps.driver import counted_trials
    from ferry.sweeps.records import SETTINGS

    home = config.ferry_home()
    rows: list[dict[str, Any]] = []
    from ferry.sweeps.study import STUDIES

    if (home / STUDIES).exists():
        import optuna

        from ferry.sweeps.study import storage

        store = storage(home)
        for summary in optuna.get_all_study_summaries(store):
            settings = summary.user_attrs.get(SETTINGS) or {}
            best = summary.best_trial
            study_id = store.get_study_id_from_name(summary.study_name)
            trials = store.get_all_trials(study_id, deepcopy=False)
            rows.append(
                {
                    "sweep": summary.study_name,
                    "trials": len(counted_trials(trials)),
                    "of": settings.get("trials"),
                    "objective": settings.get("objective"),
                    "best": best.value if best is not None else None,
                    "started": summary.datetime_start.isoformat()
                    if summary.datetime_start
                    else None,
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no sweeps yet: ferry sweep job.yaml --param … --objective METRIC:min")
        return 0
    print(f"{'SWEEP':<24} {'TRIALS':>8}  {'OBJECTIVE':<20} BEST")
    for r in rows:
        shown = "-" if r["best"] is None else f"{r['best']:g}"
        trials = f"{r['trials']}/{r['of'] or '?'}"
        print(f"{r['sweep']:<24} {trials:>8}  {r['objective'] or '':<20} {shown}")
    return 0


def _status(args: argparse.Namespace, sweep_id: str) -> int:
    from ferry import config
    from ferry.cli._common import store_now
    from ferry.sweeps.driver import counted_trials, spending, table
    from ferry.sweeps.records import CANCELLED, driven, load

    sweep, study = load(sweep_id, config.ferry_home())
    rows = table(sweep, study)
    spent = sum(s.cost for s in spending(sweep, store_now()))
    driving_now = driven(sweep.id, config.ferry_home())
    if args.json:
        print(
            json.dumps(
                {
                    "sweep": sweep.id,
                    **{k: v for k, v in sweep.settings().items() if k != "trials"},
                    "total": sweep.total,  # (the trials it runs in all)
                    "spent": round(spent, 6),  # USD, all its trials together
                    "cancelled": bool(study.user_attrs.get(CANCELLED)),
                    "driven": driving_now,  # (a driver runs it now)
                    "trials": rows,
                },
                indent=2,
                default=str,
            )
        )
        return 0
    metric = sweep.search.objective.describe()
    cost = f"{spent:.2f} USD" + (f" of {sweep.max_cost:.2f}" if sweep.max_cost else "")
    notes = ", cancelled" if study.user_attrs.get(CANCELLED) else ""
    notes += ", being driven" if driving_now else ""
    counted = len(counted_trials(study.get_trials(deepcopy=False)))
    print(
        f"sweep {sweep.id}: {counted} of {sweep.total} trials, objective {metric}, "
        f"spent {cost}{notes}"
    )
    names = [p.name for p in sweep.search.params]
    cells = [
        [
            str(r["trial"]),
            r["state"],
            "-" if r["objective"] is None else f"{r['objective']:.6g}",
            r["job"] or "-",
            *(_cell(r["params"][n]) if n in r["params"] else "" for n in names),
        ]
        for r in rows
    ]  # (blank: a parameter the trial did not draw)
    for line in _columns(["TRIAL", "STATE", "OBJECTIVE", "JOB", *names], cells, right={0, 2}):
        print(line)
    return 0


def _columns(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    """``header`` and ``rows`` as lines of columns two spaces apart, each as wide as its
    widest cell, so that every value stands under its header (the columns numbered in
    ``right`` aligned to the right, as numbers are)."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in [header, *rows]
    ]


def _plot(args: argparse.Namespace, sweep_id: str) -> int:
    from ferry import config
    from ferry.cli.sweep_plot import draw, sparkline_report
    from ferry.sweeps.records import load

    sweep, study = load(sweep_id, config.ferry_home())
    if not args.output:
        print("\n".join(sparkline_report(sweep, study)))
        return 0
    draw(sweep, study, args.output)
    _say(f"wrote {args.output}")
    return 0


def _cell(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _best(args: argparse.Namespace, sweep_id: str, ended: str = "") -> int:
    from ferry import config
    from ferry.errors import FerryError
    from ferry.spec import spec_from_dict
    from ferry.sweeps.records import JOB, load

    sweep, study = load(sweep_id, config.ferry_home())
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not done:
        why = f" ({ended})" if ended else ""
        raise FerryError(
            f"sweep {sweep_id} has no finished trial yet{why}",
            f"see its trials: ferry sweep status {sweep_id}",
        )
    best = study.best_trial
    hyper = sweep.search.hyperparameters(sweep.spec, best.params)
    # the spec that reproduces it: what differs from the defaults, without the trial's name
    spec = spec_from_dict({**sweep.spec, "hyperparameters": hyper}).model_dump(
        mode="json", exclude_defaults=True
    )
    spec.pop("name", None)
    spec.pop("sweep", None)  # (the job alone)
    found = {
        "sweep": sweep.id,
        "trial": best.number,
        "job": best.user_attrs.get(JOB),
        "objective": sweep.search.objective.describe(),
        "value": best.value,
        "params": best.params,
        "spec": spec,
    }
    if args.json:
        print(json.dumps(found, indent=2, default=str))
        return 0
    import yaml

    print(
        f"# best of sweep {sweep.id}: trial {best.number} (job {found['job']}), "
        f"{sweep.search.objective.metric} {best.value:g}"
    )
    print(yaml.safe_dump(spec, sort_keys=False).rstrip())
    return 0
