"""Token cross-entropy and perplexity, a local ``evaluate`` module (loads from its folder, offline).

Input: ``nll``, the negative log-likelihood in nats of each scored token (the gold next token for
a causal LM, the gold masked token for a masked LM). Output: ``cross_entropy`` = mean nll,
``perplexity`` = exp(cross_entropy), ``n_tokens``: the registered metrics ``cross_entropy`` and ``perplexity``
(:mod:`hf_trajpe.evaluation.metrics`).
"""
import datasets
import evaluate
import numpy as np

from hf_trajpe.evaluation.metrics import get_metric

_DESCRIPTION = "Token cross-entropy (mean negative log-likelihood, nats) and perplexity = exp(cross-entropy)."
_KWARGS_DESCRIPTION = """
Args:
    nll (list of float): negative log-likelihood of each scored token, in nats.
Returns:
    cross_entropy (float), perplexity (float), n_tokens (int)
Examples:
    >>> metric = evaluate.load("hf_trajpe/evaluation/metrics/evaluate_modules/token_cross_entropy")
    >>> metric.compute(nll=[0.5, 1.5])
    {'cross_entropy': 1.0, 'perplexity': 2.718281828459045, 'n_tokens': 2}
"""
_CITATION = ""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TokenCrossEntropy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"nll": datasets.Value("float64")}),
        )

    def _compute(self, nll):
        values = np.asarray(nll, dtype=np.float64)
        if values.size == 0:
            raise ValueError("token_cross_entropy: no tokens to score")
        total, n = values.sum(), values.size
        return {"cross_entropy": float(get_metric("cross_entropy")(total, n)),
                "perplexity": float(get_metric("perplexity")(total, n)), "n_tokens": int(n)}
