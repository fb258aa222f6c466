import pytest
import torch

from hf_trajpe import interpolate_rows


def test_linear_is_the_straight_line_between_rows():
    table = torch.tensor([[0.0, 10.0], [2.0, 20.0], [4.0, 0.0]])
    got = interpolate_rows(table, torch.tensor([0.25, 1.5, 2.0]), "linear")
    torch.testing.assert_close(got, torch.tensor([[0.5, 12.5], [3.0, 10.0], [4.0, 0.0]]))


def test_cubic_reproduces_a_quadratic_between_interior_rows():
    x = torch.arange(10, dtype=torch.float64)
    f = lambda t: 0.5 * t**2 - 2 * t + 3  # Catmull-Rom is exact for quadratics  # noqa: E731
    table = f(x)[:, None]
    p = torch.tensor([1.3, 4.5, 7.75], dtype=torch.float64)
    got = interpolate_rows(table, p, "cubic")[:, 0]
    torch.testing.assert_close(got, f(p), rtol=0, atol=1e-9)


def test_positions_are_clamped_to_the_table():
    table = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    got = interpolate_rows(table, torch.tensor([-3.0, 99.0]), "linear")
    torch.testing.assert_close(got, table[[0, 5]])


def test_gradients_reach_table_and_positions():
    table = torch.randn(8, 4, requires_grad=True)
    p = torch.tensor([2.3, 5.6], requires_grad=True)
    for mode in ("linear", "cubic"):
        interpolate_rows(table, p, mode).sum().backward()
        assert table.grad.abs().sum() > 0 and p.grad.abs().sum() > 0
        table.grad = p.grad = None


def test_unknown_mode_names_the_supported_ones():
    with pytest.raises(ValueError, match="linear.*cubic"):
        interpolate_rows(torch.zeros(3, 2), torch.zeros(1), "quadratic")
