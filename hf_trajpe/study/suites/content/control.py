"""Why a model can "improve" on random content: the diagnosis behind the control (docs/spec.md, section 4.5).

On ``random_content`` (characters drawn uniformly from an alphabet of ``k`` tokens) the best possible
perplexity is ``k``, whatever the position encoding. A model above that floor loses in two ways,
measured here: probability it puts on tokens outside the alphabet (it has not yet learned that a
random context only continues with alphabet tokens), and non-uniformity inside the alphabet. Both
are calibration, and shrink with training; neither is position. A model *below* the floor means
the harness is broken (a leak, or test data the model has seen).
"""

from __future__ import annotations

import math

import torch

__all__ = ["CALIBRATED_MASS", "diagnose_control", "random_control"]


@torch.no_grad()
def random_control(model, stream: list[int], alphabet_ids: list[int], block_size: int, n_blocks: int = 32,
                   early: int = 16, batch_size: int = 16) -> dict:
    """Perplexity against the floor ``len(alphabet_ids)``, the probability mass on the alphabet, the
    perplexity within the alphabet (renormalised), and the perplexity after the first ``early``
    positions of each block (how much is the model's slowness to recognise random context)."""
    n = min(n_blocks, len(stream) // block_size)
    if n == 0:
        raise ValueError(f"random-content stream of {len(stream)} tokens is shorter than one block of {block_size}")
    ids = torch.tensor(stream[: n * block_size]).view(n, block_size)
    alphabet = torch.tensor(sorted(set(alphabet_ids)))
    model.eval()
    device = next(model.parameters()).device
    nll, mass = [], []
    for start in range(0, n, batch_size):
        x = ids[start:start + batch_size].to(device)
        logp = model(input_ids=x).logits.float().log_softmax(-1)[:, :-1].cpu()
        gold = ids[start:start + batch_size, 1:]
        nll.append(-logp.gather(-1, gold[..., None]).squeeze(-1))
        mass.append(logp[..., alphabet].exp().sum(-1))
    nll_t, mass_t = torch.cat(nll).double(), torch.cat(mass).double()
    return {
        "floor": len(alphabet),
        "perplexity": math.exp(nll_t.mean().item()),
        "alphabet_mass": mass_t.mean().item(),
        "perplexity_within_alphabet": math.exp((nll_t + mass_t.log()).mean().item()),
        f"perplexity_after_{early}": math.exp(nll_t[:, early:].mean().item()),
        "n_tokens": int(nll_t.numel()),
    }


#: probability on the alphabet from which a model counts as trained on random content (a gain there is then real)
CALIBRATED_MASS = 0.99


def diagnose_control(rows: list[tuple[str, str, int, dict]], diagnosis: dict[str, dict],
                     calibrated_mass: float = CALIBRATED_MASS) -> dict:
    """What the random-content rows ``(model, reference, length, delta)`` mean, given each model's
    :func:`random_control` (``diagnosis``). A significant gain where the pair's worse-calibrated model puts
    less than ``calibrated_mass`` on the alphabet is calibration of an under-trained model; where both put
    more, it is a real failure, and a model below the floor means a leak. Returns ``status`` (``clean``,
    ``calibration``, ``failed``, ``broken``), ``finding`` (plain words), ``flagged`` and ``calibration`` (the
    rows of each kind, as ``[model, reference, length]``)."""
    if not diagnosis:
        flagged = [r for r in rows if r[3]["ci"][0] > 0]
        return {"status": "failed" if flagged else "clean", "finding": "", "calibration": [],
                "flagged": [[m, ref, L] for m, ref, L, _ in flagged]}
    floor = next(iter(diagnosis.values()))["floor"]
    mass = {n: c["alphabet_mass"] for n, c in diagnosis.items()}
    gains = [r for r in rows if r[3]["ci"][0] > 0]
    calib = [r for r in gains if min(mass.get(r[0], 1.0), mass.get(r[1], 1.0)) < calibrated_mass]
    real = [r for r in gains if r not in calib]
    below = {n: c["perplexity"] for n, c in diagnosis.items() if c["perplexity"] < floor * 0.99}
    masses = sorted(mass.values())
    within = sorted(c["perplexity_within_alphabet"] for c in diagnosis.values())
    out = {"status": "clean", "calibrated_mass": calibrated_mass, "floor": floor,
           "calibration": [[m, ref, L] for m, ref, L, _ in calib], "flagged": [[m, ref, L] for m, ref, L, _ in real]}
    words = []
    if below:
        out["status"] = "broken"
        words.append("⚠ **Harness broken:** " + ", ".join(f"`{n}` ({p:.1f})" for n, p in below.items())
                     + f" beat the floor of {floor} on random content, which no model can: look for a leak between "
                     "training and test data.")
    if real:
        out["status"] = out["status"] if below else "failed"
        m, ref, L, d = max(real, key=lambda r: r[3]["delta_pct"])
        words.append(f"⚠ **Control failed:** {len(real)} comparison(s) improve random content although both models "
                     f"are calibrated (at least {calibrated_mass:.0%} of their probability on the {floor} characters), "
                     f"e.g. `{m}` against `{ref}` at {L} tokens: {d['delta_pct']:+.1f}% [{d['ci'][0]:+.1f}, "
                     f"{d['ci'][1]:+.1f}]. No encoding can do that: look for a leak or a scoring bug before "
                     "trusting the other rows.")
    if calib:
        out["status"] = out["status"] if out["status"] != "clean" else "calibration"
        top = max(r[3]["delta_pct"] for r in calib)
        words.append(f"{len(calib)} comparison(s) show a significant \"gain\" on random content (up to {top:+.1f}%): "
                     f"that is calibration, not content. These models are under-trained: they put only "
                     f"{masses[0]:.1%}-{masses[-1]:.1%} of their probability on the {floor} characters random content "
                     f"is drawn from (a trained model: {calibrated_mass:.0%} or more), and their perplexity within "
                     f"those characters is {within[0]:.1f}-{within[-1]:.1f} against the floor of {floor}"
                     + ("" if below else "; none is below the floor")
                     + ". A model that learns the alphabet sooner looks better here and, by as much, on every type: "
                     "read each delta beside the random-content delta of the same pair.")
    if not words:
        words.append(f"no model improves random content significantly and none beats the floor of {floor} "
                     f"(probability on the alphabet {masses[0]:.1%}-{masses[-1]:.1%}).")
    out["finding"] = " ".join(words)
    return out
