"""A linear classifier on scikit-learn's bundled 8x8 digits, scored by 3-fold
cross-validation (CPU, about two seconds per trial).

Each fold trains for ``epochs`` passes and reports its validation loss with
``runtime.report(step=epoch, fold=fold, val_loss=...)``. Swept with
``ferry sweep examples/sweep/job.yaml``, a trial's objective is the mean over the folds,
and the pruner may cut a trial whose first two folds are clearly worse than the others'
before its last. Run alone (``python train.py --alpha 1e-4``), it prints the same
numbers.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

from ferry import runtime


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--alpha", type=float, default=1e-4)
    parser.add_argument("--eta0", type=float, default=0.01)
    parser.add_argument("--penalty", default="l2")
    parser.add_argument("--folds", type=int, default=3)
    args = parser.parse_args()
    for key, value in json.loads(os.environ.get("FERRY_HPARAMS") or "{}").items():
        setattr(args, key, type(getattr(args, key, value))(value))
    return args


def main() -> None:
    args = parse_args()
    X, y = load_digits(return_X_y=True)
    classes = np.unique(y)
    scores = []
    split = StratifiedKFold(n_splits=args.folds, shuffle=True, random_state=0)
    for fold, (train, val) in enumerate(split.split(X, y)):
        scaler = StandardScaler().fit(X[train])
        X_train, X_val = scaler.transform(X[train]), scaler.transform(X[val])
        model = SGDClassifier(
            loss="log_loss",
            alpha=args.alpha,
            penalty=args.penalty,
            learning_rate="constant",
            eta0=args.eta0,
            random_state=fold,
        )
        for epoch in range(args.epochs):
            model.partial_fit(X_train, y[train], classes=classes)
            val_loss = log_loss(y[val], model.predict_proba(X_val), labels=classes)
            val_acc = accuracy_score(y[val], model.predict(X_val))
            runtime.report(step=epoch, fold=fold, val_loss=val_loss, val_acc=val_acc)
        # (reported, not printed as val_loss=…: a printed val_loss would be read as the
        # plain metric, the objective, instead of the mean over the folds)
        print(f"fold {fold}: val_loss {val_loss:.4f}, val_acc {val_acc:.4f}", flush=True)
        scores.append(val_loss)
    print(f"mean val_loss over {args.folds} folds: {sum(scores) / len(scores):.4f}")


if __name__ == "__main__":
    main()
