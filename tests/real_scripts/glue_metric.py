"""A local stand-in for the hub's `glue` metric (MRPC: accuracy and F1), loaded by
`evaluate.load("glue", "mrpc")` from the run's working directory (`glue/glue.py`)."""

import datasets
import evaluate
import numpy as np


class Glue(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="GLUE MRPC accuracy and F1 (local stand-in)",
            citation="",
            inputs_description="predictions and references: lists of 0/1 labels",
            features=datasets.Features({"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):  # type: ignore[no-untyped-def]
        predictions, references = np.asarray(predictions), np.asarray(references)
        true_positive = int(((predictions == 1) & (references == 1)).sum())
        predicted, actual = int((predictions == 1).sum()), int((references == 1).sum())
        f1 = 2 * true_positive / (predicted + actual) if predicted + actual else 0.0
        return {"accuracy": float((predictions == references).mean()), "f1": float(f1)}
