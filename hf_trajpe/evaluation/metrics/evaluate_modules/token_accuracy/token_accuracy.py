"""Token accuracy (next-token or masked-token), a local ``evaluate`` module (loads from its folder).

Inputs: ``predictions`` (the arg-max token id at each scored position) and ``references`` (the
gold token id). Positions whose reference equals ``ignore_index`` (default -100) are not scored.
Output: ``accuracy`` (share of scored positions predicted exactly: the registered metric ``token_accuracy``,
:mod:`hf_trajpe.evaluation.metrics`) and ``n_tokens``.
"""
import datasets
import evaluate
import numpy as np

from hf_trajpe.evaluation.metrics import get_metric

_DESCRIPTION = "Share of scored token positions whose arg-max prediction equals the gold token."
_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): predicted token ids.
    references (list of int): gold token ids; positions equal to ignore_index are skipped.
    ignore_index (int, default -100)
Returns:
    accuracy (float), n_tokens (int)
Examples:
    >>> metric = evaluate.load("hf_trajpe/evaluation/metrics/evaluate_modules/token_accuracy")
    >>> metric.compute(predictions=[1, 2, 3], references=[1, 0, -100])
    {'accuracy': 0.5, 'n_tokens': 2}
"""
_CITATION = ""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TokenAccuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references, ignore_index=-100):
        pred = np.asarray(predictions, dtype=np.int64)
        ref = np.asarray(references, dtype=np.int64)
        keep = ref != ignore_index
        n = int(keep.sum())
        if n == 0:
            raise ValueError("token_accuracy: no scored positions")
        correct = int((pred[keep] == ref[keep]).sum())
        return {"accuracy": float(get_metric("token_accuracy")(correct, n)), "n_tokens": n}
