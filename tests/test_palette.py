"""The palette's colours tell apart what a reader must tell apart: measured as CIE76
ΔE in CIELAB (about 2.3 is the least difference a person notices; 25 and more reads as a
different colour at a glance, where ``compile`` and ``communication`` were 18.8 apart)."""

from __future__ import annotations

import itertools

import pytest

from explorer.palette import CATEGORY_COLORS, CRITICAL_PATH_COLORS, KIND_COLORS

APART = 25.0


def lab(hex_colour: str) -> tuple[float, float, float]:
    """sRGB ``#rrggbb`` → CIELAB (D65), by the standard formulas."""
    rgb = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92 for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(v: float) -> float:
        return v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def delta_e(a: str, b: str) -> float:
    return sum((p - q) ** 2 for p, q in zip(lab(a), lab(b), strict=True)) ** 0.5


def test_delta_e_matches_known_values() -> None:
    assert delta_e("#000000", "#ffffff") == pytest.approx(100.0, abs=0.01)
    assert delta_e("#3d85c6", "#3d85c6") == 0.0


@pytest.mark.parametrize(
    "table", [CATEGORY_COLORS, CRITICAL_PATH_COLORS], ids=["breakdown", "critical_path"]
)
def test_compile_and_communication_are_clearly_different(table: dict[str, str]) -> None:
    assert delta_e(table["compile"], table["communication"]) >= APART


def test_every_step_bar_category_stands_apart() -> None:
    """The step bars stack all seven categories side by side: every pair is far apart."""
    pairs = {
        (a, b): delta_e(CATEGORY_COLORS[a], CATEGORY_COLORS[b])
        for a, b in itertools.combinations(CATEGORY_COLORS, 2)
    }
    close = {pair: round(d, 1) for pair, d in pairs.items() if d < APART}
    assert not close, close


def test_compile_slices_differ_from_every_other_kind() -> None:
    close = {
        kind: round(delta_e(KIND_COLORS["compile"], colour), 1)
        for kind, colour in KIND_COLORS.items()
        if kind != "compile" and delta_e(KIND_COLORS["compile"], colour) < APART
    }
    assert not close, close
