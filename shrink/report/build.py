"""Build DIR/report.md, DIR/report.html and the PNG figures from a prediction.

The report answers first and explains after. In this order: which mapping to deploy,
its MATs with their intervals and the validation's errors (the answer); whether the
measurement can be trusted, one line per check (the load generator, failed requests,
saturation, the share's speed, the host's drift); the curves; the validation and the
what-if, when there are any. An appendix then holds the method: the levels measured,
what was assumed, the validation's details and the provenance. Each section is a
module of :mod:`shrink.report.sections` that writes its main part into the report and
its details into the appendix; :mod:`shrink.report.blocks` writes the Markdown and
the HTML from the same blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shrink.atomic import make_dirs, write_text
from shrink.loadcurve import LoadCurve
from shrink.prediction import SCHEMA_ID, Prediction
from shrink.report.blocks import Doc, render_html, render_markdown
from shrink.report.sections import Measured
from shrink.report.sections.answer import add_answer
from shrink.report.sections.assumptions import add_assumptions
from shrink.report.sections.curves import add_curves
from shrink.report.sections.self_checks import add_self_checks
from shrink.report.sections.validation import add_validation
from shrink.report.sections.whatif import add_whatif
from shrink.report.series import curve_series
from shrink.validate import Validation

__all__ = ["APPENDIX", "curve_series", "write_report"]

APPENDIX = "Appendix: how it was measured"


def write_report(
    out_dir: str | Path,
    prediction: Prediction | Mapping[str, Any],
    *,
    measured: LoadCurve | None = None,
    measured_label: str = "measured on the share",
    full_run: LoadCurve | None = None,
    predicted_curve: LoadCurve | None = None,
    validation: Validation | None = None,
    whatif: Prediction | Mapping[str, Any] | None = None,
    title: str = "shrink capacity prediction",
    measured_file: str | Path | None = None,
) -> dict[str, Path]:
    """Write report.md, report.html and figures into ``out_dir``; return their paths.

    ``prediction`` and ``whatif`` are Predictions, or their JSON form. ``measured_file``:
    where ``measured`` is written, when not beside the report (validate ``-o``).
    """
    pred = _as_prediction(prediction)
    out = Path(out_dir)
    make_dirs(out)
    thresholds = {k: float(v) for k, v in (pred.thresholds or {}).items()}
    doc, appendix = Doc(title), Doc(APPENDIX)
    files: dict[str, Path] = {}
    add_answer(doc, pred, thresholds, validation, appendix=appendix)
    m = Measured(
        pred, thresholds, measured, measured_label, full_run, _curve_file(out, measured_file)
    )
    add_self_checks(doc, m, appendix=appendix)
    add_curves(doc, out, files, m, appendix=appendix)
    if validation is not None:
        add_validation(doc, validation, appendix=appendix)
    if whatif is not None:
        add_whatif(doc, out, files, _as_prediction(whatif), thresholds)
    add_assumptions(appendix, pred)
    doc.h(1, APPENDIX)
    doc.blocks += appendix.blocks
    md = render_markdown(doc)
    write_text(out / "report.md", md)
    write_text(out / "report.html", render_html(doc))
    files["md"] = out / "report.md"
    files["html"] = out / "report.html"
    return files


def _curve_file(out: Path, measured_file: str | Path | None) -> str:
    """The share's curve file as a shell command run in ``out`` names it, quoted."""
    import os
    import shlex

    if measured_file is None:
        return "measured-curve.json"
    return shlex.quote(os.path.relpath(measured_file, out))


def _as_prediction(p: Prediction | Mapping[str, Any]) -> Prediction:
    if isinstance(p, Prediction):
        return p
    return Prediction.from_dict({**p, "schema": SCHEMA_ID, "mappings": p.get("mappings", {})})
