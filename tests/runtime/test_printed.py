"""What the generic reader takes from printed lines, on lines copied from real training logs:
JSON objects and ``key=value`` pairs, nothing from warnings, ``key: value`` only through the
spec's own patterns."""

from __future__ import annotations

import math
import re

import pytest

from ferry.runtime.printed import parse_line

NO_PATTERNS: dict[str, re.Pattern[str]] = {}


def metrics(text: str, patterns: dict[str, re.Pattern[str]] = NO_PATTERNS) -> dict[str, float]:
    return parse_line(text, patterns)[1]


@pytest.mark.parametrize(
    "line",
    [
        # LightGBM prints its warnings on stdout, some with numbers, some with key=value
        "[LightGBM] [Warning] No further splits with positive gain, best gain: -inf",
        "[LightGBM] [Warning] min_data_in_leaf is set=20, min_child_samples=20 will be ignored."
        " Current value: min_data_in_leaf=20",
        # the logging module's default format, and a common custom one
        "WARNING:root:lr=0.5 is too high, using lr=0.1",
        "2024-05-01 10:00:00,123 - trainer - ERROR - grad_norm=inf, skipping step=5",
        "2024-05-01 10:00:00,123 | CRITICAL | workers=0",
        # Python warnings (shown on stdout when a script redirects them)
        "/home/me/train.py:12: UserWarning: batch_size=3 is smaller than n_gpus=4",
        "DeprecationWarning: max_iter=100 will change to max_iter=200",
        "Warning: clip_value=0 disables clipping",
        # Optuna's own log prefix, glog/absl's
        "[W 2024-05-01 10:00:00,123] Trial 7 failed with parameters: {'lr': 0.3} value=nan",
        "E0501 10:00:00.123456  4242 trainer.cc:88] retries=3 left",
    ],
)
def test_numbers_in_warning_lines_are_not_metrics(line: str) -> None:
    assert metrics(line) == {}


@pytest.mark.parametrize(
    "line",
    [
        # a banner, an Optuna summary, a test score: `key: value` is not read by itself
        "Batchsize: 64  Steps: 1000",
        "Trial 3 finished with value: 0.87 and parameters: {'lr': 0.01}. Best is trial 1 with"
        " value: 0.9.",
        "  Params: ",
        "    high: 5",
        "    low: 1",
        "number: 3",
        "trial_id: 12",
        "Test MSE: 0.24",
        "[LightGBM] [Info] Number of positive: 3140, number of negative: 3373",
    ],
)
def test_colon_pairs_are_not_metrics(line: str) -> None:
    assert metrics(line) == {}


def test_key_value_pairs_and_json_objects_are_metrics() -> None:
    assert parse_line("epoch=3/20 loss=0.31 val_acc=0.9 time=0.05s", NO_PATTERNS) == (
        3,
        {"loss": 0.31, "val_acc": 0.9, "steps_total": 20.0},
    )
    assert parse_line('{"step": 9, "val_loss": 0.12, "note": "x", "ok": true}', NO_PATTERNS) == (
        9,
        {"val_loss": 0.12},
    )
    # info-level log lines carry metrics as usual; so do names with "error" in them
    assert metrics("INFO:root:loss=0.25 train_error=0.125") == {"loss": 0.25, "train_error": 0.125}
    assert metrics("2024-05-01 10:00:00,123 - trainer - INFO - loss=0.5") == {"loss": 0.5}
    assert math.isnan(metrics("loss=nan")["loss"])


def test_structured_log_records_at_warning_level_are_not_metrics() -> None:
    assert metrics('{"level": "warning", "msg": "slow batch", "seconds": 12.5}') == {}
    assert metrics('{"levelname": "INFO", "loss": 0.5}') == {"loss": 0.5}


def test_the_users_own_patterns_read_colon_pairs_on_any_line() -> None:
    patterns = {"test_mse": re.compile(r"Test MSE: ([0-9.]+)"), "gain": re.compile(r"gain: (\S+)")}
    assert metrics("Test MSE: 0.24", patterns) == {"test_mse": 0.24}
    found = metrics("[LightGBM] [Warning] best gain: -inf", patterns)
    assert list(found) == ["gain"] and found["gain"] == -math.inf


def test_settings_shown_as_a_repr_and_logger_bookkeeping_are_not_metrics() -> None:
    assert metrics("Namespace(batch_size=64, lr=0.001, seed=42)") == {}
    assert metrics("args: Namespace(lr=0.1) then loss=0.5") == {"loss": 0.5}
    record = '{"levelname": "INFO", "lineno": 88, "process": 4242, "created": 1.7e9, "loss": 0.5}'
    assert metrics(record) == {"loss": 0.5}
    assert metrics('{"lineno": 3, "loss": 0.5}') == {"lineno": 3.0, "loss": 0.5}  # not a record


def test_environment_variables_a_script_shows_are_not_metrics() -> None:
    # a training script's setup line, as one printed it on an H200
    assert metrics("device NVIDIA H200 CUDA_VISIBLE_DEVICES=0") == {}
    assert metrics("RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 OMP_NUM_THREADS=1 loss=0.5") == {"loss": 0.5}
    # short capitals are metric names
    assert metrics("MSE=0.24 F1=0.8 AUC=0.91") == {"MSE": 0.24, "F1": 0.8, "AUC": 0.91}


def test_optunas_printed_trials_are_not_metrics() -> None:
    # what a script running its own study prints at the end (`print(study.best_trial)`):
    # nested reprs, whose `number=` and `trial_id=` were once stored as metrics
    import contextlib
    import io

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    study.optimize(lambda t: (t.suggest_float("x", -10, 10) - 2) ** 2, n_trials=3)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print(study.best_trial)
        print(study.trials[:2])
        print(f"done: best={study.best_value} trial={study.best_trial}")
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith("FrozenTrial(number=") and "trial_id=" in lines[0]
    assert [metrics(line) for line in lines[:2]] == [{}, {}]
    assert metrics(lines[2]) == {"best": study.best_value}


def test_pairs_beside_a_call_without_settings_are_read() -> None:
    assert metrics("Epoch(3) loss=0.3") == {"loss": 0.3}
    assert metrics("cfg=Config(lr=0.1, opt=Adam(betas=(0.9, 0.99))) loss=0.5") == {"loss": 0.5}
    assert metrics("Trainer(max_epochs=5, ...") == {}  # cut off before its bracket closed
