import numpy as np
import pytest
import torch

from hf_trajpe import SinusoidalTable, sinusoidal_encoding, sinusoidal_frequencies

from . import reference


def test_matches_numpy_reference_at_integer_and_fractional_positions():
    pos = torch.tensor([0.0, 1.0, 2.5, 17.25, 511.9, 4095.0])
    got = sinusoidal_encoding(pos.double(), 32)
    np.testing.assert_allclose(got.numpy(), reference.sinusoidal(pos.numpy(), 32), rtol=0, atol=1e-12)
    got32 = sinusoidal_encoding(pos, 32)
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.numpy(), reference.sinusoidal(pos.numpy(), 32), atol=5e-4)


def test_layout_is_interleaved_sin_cos():
    pe = sinusoidal_encoding(torch.tensor([3.0]), 8)[0]
    w = sinusoidal_frequencies(8, dtype=torch.float64)
    assert torch.allclose(pe[0::2].double(), torch.sin(3.0 * w), atol=1e-6)
    assert torch.allclose(pe[1::2].double(), torch.cos(3.0 * w), atol=1e-6)


def test_int_argument_and_shapes():
    assert sinusoidal_encoding(5, 16).shape == (5, 16)
    assert sinusoidal_encoding(torch.zeros(2, 3, 4), 6).shape == (2, 3, 4, 6)


def test_shift_is_a_rotation_of_each_pair():
    dim, t = 64, 3.7
    p = torch.linspace(0, 200, 57, dtype=torch.float64)
    a, b = sinusoidal_encoding(p, dim), sinusoidal_encoding(p + t, dim)
    w = sinusoidal_frequencies(dim, dtype=torch.float64)
    c, s = torch.cos(t * w), torch.sin(t * w)
    sin_p, cos_p = a[..., 0::2], a[..., 1::2]
    # sin(x + y) = sin x cos y + cos x sin y; cos(x + y) = cos x cos y - sin x sin y
    torch.testing.assert_close(b[..., 0::2], sin_p * c + cos_p * s, rtol=0, atol=1e-10)
    torch.testing.assert_close(b[..., 1::2], cos_p * c - sin_p * s, rtol=0, atol=1e-10)


def test_dot_product_depends_only_on_the_offset():
    dim = 128
    p = torch.tensor([0.0, 5.5, 100.25, 1000.0], dtype=torch.float64)
    q = torch.tensor([3.0, 0.0, 99.0, 777.7], dtype=torch.float64)
    dots = (sinusoidal_encoding(p, dim) * sinusoidal_encoding(q, dim)).sum(-1)
    w = sinusoidal_frequencies(dim, dtype=torch.float64)
    expected = torch.cos((p - q)[:, None] * w).sum(-1)
    torch.testing.assert_close(dots, expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("dim", [7, 0, -2])
def test_bad_dim_is_refused_with_a_clear_error(dim):
    with pytest.raises(ValueError, match="dim"):
        sinusoidal_encoding(torch.arange(4), dim)


def test_table_modes_agree_with_exact_within_documented_error():
    table = SinusoidalTable(8192, 512)
    pos = torch.cat((torch.rand(4096, dtype=torch.float64) * 8191, torch.tensor([0.5, 8190.5], dtype=torch.float64)))
    exact = torch.from_numpy(reference.sinusoidal(pos.numpy(), 512))
    err = {m: (table(pos.float(), m).double() - exact).abs() for m in ("linear", "cubic", "exact")}
    interior = (pos > 1) & (pos < 8190)
    # docs/encodings.md: linear 0.122; cubic 0.0216 inside, 0.061 in the end intervals
    assert err["exact"].max() < 1e-3
    assert err["linear"].max() < 0.125
    assert err["cubic"].max() < 0.065
    assert err["cubic"][interior].max() < 0.022
    assert err["cubic"].mean() < err["linear"].mean() / 4


def test_cubic_ends_are_extrapolated_not_repeated():
    table = SinusoidalTable(16, 4)
    pos = torch.tensor([0.5, 14.5], dtype=torch.float64)
    exact = torch.from_numpy(reference.sinusoidal(pos.numpy(), 4))
    # the slow pair (w = 0.01): a repeated end row would be off by ~6e-4 there
    assert (table(pos, "cubic").double() - exact)[:, 2:].abs().max() < 1e-5


def test_table_rows_are_exact_at_integer_positions():
    table = SinusoidalTable(64, 16)
    idx = torch.arange(64)
    for mode in ("linear", "cubic"):
        assert torch.equal(table(idx.float(), mode), table.table)
    assert torch.equal(table(idx), table.table)


def test_graph_and_no_graph_paths_agree_and_gradient_flows():
    pos = torch.tensor([[0.5, 3.25, 9.0]], requires_grad=True)
    with_graph = sinusoidal_encoding(pos, 8)
    with torch.no_grad():
        without = sinusoidal_encoding(pos, 8)
    assert torch.equal(with_graph.detach(), without)
    with_graph.sum().backward()
    assert pos.grad is not None and pos.grad.abs().sum() > 0


def test_float32_keeps_1e4_accuracy_up_to_32k_positions():
    """The angle p * w_k is not formed in float32 (at p = 32,768 its rounding alone costs 2e-3): the
    integer part comes from float64-built tables reduced modulo 2 pi, the fraction is added to them."""
    pos = torch.tensor([0.0, 0.25, 2047.0, 12345.678, 30000.123, 32767.0, 32767.5, 32767.99, 32768.0])
    got = sinusoidal_encoding(pos, 768)
    assert got.dtype == torch.float32
    want = reference.sinusoidal(pos.double().numpy(), 768)  # at the same float32 positions, in float64
    assert np.abs(got.double().numpy() - want).max() < 1e-4
    # integer tensors take the same path
    ints = torch.tensor([0, 1, 4095, 32768])
    assert np.abs(sinusoidal_encoding(ints, 64).double().numpy() - reference.sinusoidal(ints.numpy(), 64)).max() < 1e-5


def test_float32_gradient_matches_the_float64_formula():
    """d/dp sin(p w) = w cos(p w) and d/dp cos(p w) = -w sin(p w), through the fractional part."""
    pos = torch.tensor([[0.5, 3.25, 511.9, 30000.7, 32767.5]], requires_grad=True)
    out = sinusoidal_encoding(pos, 64)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    out.backward(g)
    p64 = pos.detach().double().requires_grad_()
    w = sinusoidal_frequencies(64, dtype=torch.float64)
    angles = p64[..., None] * w
    torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).backward(g.double())
    torch.testing.assert_close(pos.grad.double(), p64.grad, rtol=1e-4, atol=1e-4)


def test_float64_positions_pass_gradcheck():
    pos = torch.tensor([0.3, 7.9, 1000.25], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: sinusoidal_encoding(p, 16), (pos,))


def test_non_finite_and_out_of_range_positions_do_not_break_the_lookup():
    pe = sinusoidal_encoding(torch.tensor([float("nan"), float("inf"), -3.5, 2.0**24 + 2]), 8)
    assert pe[:2].isnan().all()  # as sin/cos of them would be
    want = reference.sinusoidal(np.array([-3.5, 2.0**24 + 2]), 8)
    assert np.abs(pe[2].double().numpy() - want[0]).max() < 1e-6  # negative: the plain float32 product
    assert pe[3].isfinite().all()


def test_cached_tables_work_under_inference_mode_then_with_autograd():
    from hf_trajpe.encodings.sinusoidal import _angle_rows

    _angle_rows.cache_clear()  # the tables are built (and cached) by the next call, in inference mode
    with torch.inference_mode():
        sinusoidal_encoding(torch.tensor([1.5]), 12)  # builds and caches the tables for width 12
    pos = torch.tensor([1.5, 2.25], requires_grad=True)
    sinusoidal_encoding(pos, 12).sum().backward()
    assert pos.grad is not None and torch.isfinite(pos.grad).all()
