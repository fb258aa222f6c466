import warnings

import numpy as np
import pytest
import torch

from hf_trajpe import TrajectoryMonitor, trajectory_positions

from . import reference


def test_matches_numpy_reference_on_random_embeddings():
    emb = torch.randn(3, 40, 16) * 0.3
    for strength, beta in [(0.2, 2.0), (0.7, 0.5), (1.0, 5.0)]:
        got = trajectory_positions(emb, strength=strength, beta=beta)
        np.testing.assert_allclose(got.numpy(), reference.trajectory(emb.numpy(), None, strength, beta),
                                   rtol=0, atol=2e-5)


def test_output_is_float32_batch_by_seq():
    out = trajectory_positions(torch.randn(2, 5, 4, dtype=torch.float64))
    assert out.dtype == torch.float32 and out.shape == (2, 5)


def test_strength_zero_is_arange_bit_for_bit():
    emb = torch.randn(2, 33, 8)
    mask = torch.ones(2, 33, dtype=torch.long)
    mask[1, :5] = 0
    assert torch.equal(trajectory_positions(emb, strength=0.0), torch.arange(33.0).expand(2, 33))
    got = trajectory_positions(emb, mask, strength=0.0)
    assert torch.equal(got[0], torch.arange(33.0))
    assert torch.equal(got[1, 5:], torch.arange(28.0))


def test_single_token_is_position_zero_bit_for_bit():
    assert torch.equal(trajectory_positions(torch.randn(4, 1, 8), strength=1.0), torch.zeros(4, 1))


def test_deterministic():
    emb = torch.randn(2, 100, 32)
    assert torch.equal(trajectory_positions(emb), trajectory_positions(emb.clone()))


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_gives_each_sequence_its_positions_alone(side):
    lengths = [7, 12, 3]
    seqs = [torch.randn(1, n, 8) for n in lengths]
    alone = [trajectory_positions(s)[0] for s in seqs]
    n = max(lengths)
    emb = torch.randn(len(seqs), n, 8) * 100  # junk under the pads must not matter
    mask = torch.zeros(len(seqs), n, dtype=torch.long)
    for r, s in enumerate(seqs):
        sl = slice(n - s.shape[1], n) if side == "left" else slice(0, s.shape[1])
        emb[r, sl] = s[0]
        mask[r, sl] = 1
    got = trajectory_positions(emb, mask)
    for r in range(len(seqs)):
        real = got[r][mask[r].bool()]
        torch.testing.assert_close(real, alone[r], rtol=0, atol=1e-6)


def test_holes_in_the_mask_are_skipped_like_pads():
    emb = torch.randn(1, 6, 4)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])
    ref = reference.trajectory(emb.numpy(), mask.numpy())
    np.testing.assert_allclose(trajectory_positions(emb, mask).numpy(), ref, atol=1e-6)


def test_bf16_long_sequence_within_1e_3_of_float64_reference():
    emb = (torch.randn(1, 8192, 64) * 0.05).to(torch.bfloat16)
    got = trajectory_positions(emb, strength=0.3, beta=2.0)
    e64 = emb.double()
    steps = 0.3 * torch.tanh(2.0 * torch.linalg.vector_norm(e64[:, 1:] - e64[:, :-1], dim=-1))
    ref = torch.arange(8192, dtype=torch.float64) + torch.cat((torch.zeros(1, 1, dtype=torch.float64),
                                                                steps.cumsum(1)), 1)
    assert (got.double() - ref).abs().max().item() < 1e-3


def test_max_positions_clamps():
    emb = torch.randn(1, 50, 4) * 10
    got = trajectory_positions(emb, strength=1.0, max_positions=60)
    assert got.max().item() == 59.0
    np.testing.assert_allclose(got.numpy(), reference.trajectory(emb.numpy(), None, 1.0, 2.0, 60), atol=1e-5)


def test_gradients_flow_into_embeddings_and_stop_with_detach():
    emb = (torch.randn(2, 10, 8) * 0.2).requires_grad_()
    trajectory_positions(emb).sum().backward()
    assert emb.grad is not None and emb.grad.abs().sum() > 0
    emb2 = emb.detach().clone().requires_grad_()
    out = trajectory_positions(emb2, detach=True)
    assert not out.requires_grad


def test_gradient_reaches_a_strength_tensor():
    s = torch.tensor(0.3, requires_grad=True)
    trajectory_positions(torch.randn(1, 6, 4), strength=s).sum().backward()
    assert s.grad is not None and s.grad.item() > 0


def test_per_sequence_strength():
    emb = torch.randn(2, 9, 4)
    got = trajectory_positions(emb, strength=torch.tensor([0.0, 0.5]))
    assert torch.equal(got[0], torch.arange(9.0))
    torch.testing.assert_close(got[1], trajectory_positions(emb[1:], strength=0.5)[0])


@pytest.mark.parametrize("split", [1, 5, 11])
def test_incremental_calls_with_past_equal_one_call(split):
    emb = torch.randn(2, 12, 8)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :3] = 0  # left padding, as in batched generation
    whole = trajectory_positions(emb, mask)
    first, past = trajectory_positions(emb[:, :split], mask[:, :split], return_past=True)
    rest = [first]
    for t in range(split, 12):
        out, past = trajectory_positions(emb[:, t:t + 1], mask[:, t:t + 1], past=past, return_past=True)
        rest.append(out)
    torch.testing.assert_close(torch.cat(rest, 1), whole, rtol=0, atol=1e-6)
    assert past.num_real.tolist() == [12, 9]


def test_nan_sequence_falls_back_warns_once_and_counts():
    emb = torch.randn(3, 8, 4)
    emb[1, 4, 2] = float("nan")
    emb[2, 0, 0] = float("inf")
    monitor = TrajectoryMonitor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = trajectory_positions(emb, strength=0.5, monitor=monitor)
    assert len([w for w in caught if "non-finite" in str(w.message)]) == 1
    assert torch.equal(got[1], torch.arange(8.0)) and torch.equal(got[2], torch.arange(8.0))
    torch.testing.assert_close(got[0], trajectory_positions(emb[:1], strength=0.5)[0])
    assert monitor.as_dict()["fallback_sequences"] == 2


def test_nan_under_a_pad_is_ignored():
    emb = torch.randn(1, 5, 4)
    emb[0, 0] = float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = trajectory_positions(emb, torch.tensor([[0, 1, 1, 1, 1]]))
    assert torch.isfinite(got).all()


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf")])
def test_bad_strength_is_refused(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        trajectory_positions(torch.randn(1, 3, 2), strength=bad)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        trajectory_positions(torch.randn(1, 3, 2), strength=torch.tensor([bad]))


def test_a_strength_tensor_is_checked_again_after_an_in_place_change():
    s = torch.tensor(0.3)
    trajectory_positions(torch.randn(1, 3, 2), strength=s)  # checked once, then remembered
    trajectory_positions(torch.randn(1, 3, 2), strength=s)
    s.fill_(1.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        trajectory_positions(torch.randn(1, 3, 2), strength=s)
    with torch.inference_mode():
        bad = torch.tensor(-1.0)
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            trajectory_positions(torch.randn(1, 3, 2), strength=bad)


def test_bad_inputs_are_refused_with_clear_errors():
    with pytest.raises(TypeError, match="floating-point"):
        trajectory_positions(torch.ones(1, 3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[batch, seq, dim\]"):
        trajectory_positions(torch.randn(3, 2))
    with pytest.raises(ValueError, match="attention_mask must have shape"):
        trajectory_positions(torch.randn(2, 3, 2), torch.ones(2, 4))
    with pytest.raises(ValueError, match="beta"):
        trajectory_positions(torch.randn(1, 3, 2), beta=0.0)
    with pytest.raises(TypeError, match="strength"):
        trajectory_positions(torch.randn(1, 3, 2), strength="0.2")
    with pytest.raises(ValueError, match="one value per sequence"):
        trajectory_positions(torch.randn(2, 3, 2), strength=torch.tensor([0.1, 0.2, 0.3]))


def test_monitor_statistics():
    monitor = TrajectoryMonitor()
    emb = torch.randn(2, 20, 4) * 10  # steps ~ strength
    pos = trajectory_positions(emb, strength=0.5, max_positions=15, monitor=monitor)
    stats = monitor.as_dict()
    assert stats["calls"] == 1 and stats["tokens"] == 40
    assert stats["clamped_share"] == pytest.approx(float((pos == 14).sum() - 0) / 40, abs=0.05)
    assert 0 < stats["displacement_mean"] <= stats["displacement_max"] <= 0.5 * 19 + 1e-6
    p = pos.double()
    d2 = (p[:, 2:] - 2 * p[:, 1:-1] + p[:, :-2]).abs().mean().item()
    assert stats["smoothness"] == pytest.approx(d2, rel=1e-6)
    with monitor.timed(tokens=40):
        trajectory_positions(emb)
    assert monitor.timed_calls == 1 and monitor.timed_tokens == 40
    assert monitor.as_dict()["encode_seconds_per_call"] == monitor.as_dict()["encode_seconds"] > 0


@pytest.mark.parametrize("case", ["no mask", "ones mask", "a pad", "a non-finite step", "a limit"])
def test_the_plain_decoding_step_equals_the_general_one_bit_for_bit(case):
    """A decoding step where every row is real and started takes a short path (a third of the ops);
    positions and the state it returns are those of the general step, bit for bit."""
    import dataclasses

    gen = torch.Generator().manual_seed(4)
    emb = torch.randn(3, 6, 8, generator=gen)
    first, past = trajectory_positions(emb[:, :5], strength=0.3, return_past=True)
    new = emb[:, 5:]
    mask = None if case == "no mask" else torch.ones(3, 1, dtype=torch.long)
    if case == "a pad":
        mask[1, 0] = 0
    if case == "a non-finite step":
        new = new.clone()
        new[2, 0, 3] = float("inf")
    limit = 7 if case == "a limit" else None
    results = []
    for started in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results.append(trajectory_positions(new, mask, strength=0.3, max_positions=limit, return_past=True,
                                                past=dataclasses.replace(past, all_started=started)))
    (fast, fast_past), (general, general_past) = results
    assert torch.equal(fast, general)
    for field in ("last_embedding", "displacement", "num_real"):
        assert torch.equal(getattr(fast_past, field), getattr(general_past, field))
    assert fast_past.all_started is True
