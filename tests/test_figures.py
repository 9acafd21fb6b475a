"""The report's figures read right: coinciding lines stay apart, ms on log axes, the
legend clear of the threshold, an unreached MAT drawn as a bound, few-request p99.9s
counted. (The PNGs were also looked at by eye; see the commit that added this.)"""

from __future__ import annotations

import numpy as np
import pytest

from shrink.report import figures
from shrink.report.figures import Series, latency_figure

pytestmark = pytest.mark.compute

X = np.linspace(500, 5000, 12)
MEAN = 0.002 + 0.0005 / (1 - X / 5600)
P999 = 0.02 + 0.01 / (1 - X / 5600)
NAMES = ("1-replica", "2-replica-direct", "2-replica-indirect")


@pytest.fixture
def drawn(tmp_path, monkeypatch):
    """The figure latency_figure drew, kept from being closed."""
    kept = []
    monkeypatch.setattr(figures.plt, "close", kept.append)
    same = [
        Series(f"predicted: {n}", X, {"mean": MEAN, "p999": P999},
               mats={"mean": (4200.0, 4000.0, 4400.0), "p999": (5000.0, 4900.0, 5100.0)},
               mat_status={"mean": "ok", "p999": "not_reached"})
        for n in NAMES
    ]  # fmt: skip
    measured = Series("measured", X[::3], {"mean": MEAN[::3], "p999": P999[::3]},
                      points=True, counts=[60, 400, 2500, 9000])  # fmt: skip
    path = latency_figure(tmp_path / "l.png", [*same, measured], {"mean": 0.01, "p999": 0.5},
                          title="t")  # fmt: skip
    assert path.stat().st_size > 10_000
    (fig,) = kept
    fig.canvas.draw()
    return fig


def _labels(fig) -> list[str]:
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_coinciding_lines_differ_in_style_and_say_so(drawn):
    ax = drawn.axes[1]
    lines = [ln for ln in ax.get_lines() if ln.get_label().startswith("predicted")]
    assert len(lines) == 3
    styles = {(str(ln.get_linestyle()), ln.get_marker(), ln.get_linewidth()) for ln in lines}
    assert len(styles) == 3
    labels = _labels(drawn)
    assert any("2-replica-indirect (on top of 1-replica, 2-replica-direct)" in t for t in labels)


def test_log_axes_are_labelled_in_plain_ms(drawn):
    for ax in drawn.axes:
        ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert len(ticks) >= 2 and not any("10^" in t or "$" in t for t in ticks), ticks
        assert ax.get_ylabel().endswith("(ms)")
    assert "500" in [t.get_text() for t in drawn.axes[1].get_yticklabels()]


def test_the_legend_is_clear_of_the_threshold_line(drawn):
    legend = drawn.legends[0].get_window_extent()
    for ax in drawn.axes:
        assert legend.y1 <= ax.get_window_extent().y0  # below every panel
    assert any(t.startswith("threshold 500 ms") for t in _labels(drawn))


def test_an_unreached_mat_is_a_bound_not_a_line(drawn):
    mean_ax, p999_ax = drawn.axes
    texts = [t.get_text() for t in p999_ax.texts]
    assert texts.count("MAT >= 5,000") == 3
    dotted = [ln for ln in p999_ax.get_lines() if ln.get_linestyle() == ":"]
    assert dotted == []  # the MAT style is kept for crossings
    assert [ln for ln in mean_ax.get_lines() if ln.get_linestyle() == ":"]
    assert "threshold not crossed: MAT >= X" in _labels(drawn)


def test_a_p999_from_few_requests_shows_its_count(drawn):
    texts = [t.get_text() for t in drawn.axes[1].texts]
    assert "n=60" in texts and "n=400" in texts and "n=2,500" not in texts
    assert not [t for t in drawn.axes[0].texts if t.get_text().startswith("n=")]


def test_separate_lines_are_not_called_coinciding():
    a = Series("a", X, {"mean": MEAN})
    b = Series("b", X, {"mean": MEAN * 1.2})
    assert not figures._same_line(a, b, "mean") and figures._same_line(a, a, "mean")


def test_names_with_dollars_are_drawn_as_written(tmp_path, monkeypatch):
    # A machine's or mapping's name reaches a title or legend: mathtext read "$x^$" in
    # one as a formula and the report failed (ParseSyntaxException).
    kept = []
    monkeypatch.setattr(figures.plt, "close", kept.append)
    name = "$x^$ costs $5"
    s = Series(f"predicted: {name}", X, {"mean": MEAN, "p999": P999})
    latency_figure(tmp_path / "l.png", [s], {"mean": 0.01}, title=f"What-if on {name}")
    (fig,) = kept
    assert fig._suptitle.get_text() == f"What-if on {name}"
    assert f"predicted: {name}" in _labels(fig)
    assert not any(t.get_parse_math() for t in fig.findobj(lambda o: hasattr(o, "get_parse_math")))


def test_a_long_name_keeps_the_title_inside_its_figure(tmp_path, monkeypatch):
    """A machine or trace name of thousands of characters (one word of wide letters, or
    many words): the title is wrapped and cut (two lines, an ellipsis), its drawn width
    within the figure's, and the latency figure, saved with a tight box, not stretched."""
    from helpers.curves import mm1_curve
    from PIL import Image

    kept = []
    monkeypatch.setattr(figures.plt, "close", kept.append)
    s = Series("predicted: 1-replica", X, {"mean": MEAN, "p999": P999})
    png = latency_figure(tmp_path / "l.png", [s], {"mean": 0.01, "p999": 0.5},
                         title=f"What-if on {'m' * 3000}")  # fmt: skip
    level = mm1_curve([50.0], 100.0, reps=1, n=2000).levels[0]
    figures.cdf_figure(tmp_path / "cdf.png", [("full-scale run", level, 1.0)],
                       title=" ".join(["a-long-trace-name"] * 200))  # fmt: skip
    for fig in kept:
        fig.canvas.draw()
        text = fig._suptitle.get_text()
        assert text.count("\n") == 1 and text.endswith("\u2026"), text
        assert fig._suptitle.get_window_extent().width <= fig.bbox.width
    # 12.4 in at 110 dpi, and a little for the legend below the panels.
    assert Image.open(png).size[0] <= 1.05 * 12.4 * 110


def test_a_long_name_keeps_the_legend_inside_its_figure(tmp_path, monkeypatch):
    """A mapping or trace name of thousands of characters in a legend label widened the
    legend, and the latency figure saved with a tight box, to match: cut with an ellipsis."""
    from PIL import Image

    kept = []
    monkeypatch.setattr(figures.plt, "close", kept.append)
    s = Series(f"predicted: {'m' * 3000}", X, {"mean": MEAN, "p999": P999})
    png = latency_figure(tmp_path / "l.png", [s], {"mean": 0.01, "p999": 0.5}, title="t")
    (fig,) = kept
    long = [t for t in _labels(fig) if t.startswith("predicted: ")]
    assert long and all(len(t) <= 90 and t.endswith("\u2026") for t in long), long
    assert Image.open(png).size[0] <= 1.05 * 12.4 * 110
