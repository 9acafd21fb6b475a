"""The appendix's method: what was assumed, the calibration, and the provenance."""

from __future__ import annotations

import json
from typing import Any

from shrink.prediction import Prediction
from shrink.report.blocks import Doc
from shrink.topology import format_cpulist

__all__ = ["add_assumptions", "provenance_rows"]


def add_assumptions(doc: Doc, pred: Prediction) -> None:
    """The method as assumed, then the provenance as a key/value table."""
    doc.h(2, "Method and assumptions")
    doc.ul([str(a) for a in pred.assumptions] or ["none recorded"])
    cal = pred.calibration
    if cal:
        doc.p(f"Calibration: {cal.get('name', cal) if isinstance(cal, dict) else cal}")
    rows = provenance_rows(pred.provenance or {})
    if rows:
        doc.h(2, "Provenance")
        doc.table(["what", "value"], rows)


def provenance_rows(prov: dict[str, Any]) -> list[list[str]]:
    """One row per value a person can read: JSON kept as text is unpacked, a CPU list
    is written as ranges, and empty values (``{}``, ``""``, null) are left out."""
    rows = []
    for key, raw in sorted(prov.items()):
        value = _unpack(raw)
        if key == "share" and isinstance(value, dict):
            text = _share_text(value)
        elif key == "server_cpus" and isinstance(value, list) and value:
            text = format_cpulist([int(c) for c in value])
        else:
            text = _plain(value)
        if text:
            rows.append([key.replace("_", " "), text])
    return rows


def _unpack(raw: Any) -> Any:
    """A value the prediction keeps as JSON text, as the value it holds."""
    if isinstance(raw, str) and raw[:1] in "{[":
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _plain(value: Any) -> str:
    """A scalar as itself; a mapping as ``key value`` pairs; empty as ``""``."""
    if value is None or value == "" or value == {} or value == []:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k} {t}" for k, v in value.items() if (t := _plain(v)))
    if isinstance(value, list):
        return ", ".join(t for v in value if (t := _plain(v)))
    return str(value)


def _share_text(share: dict[str, Any]) -> str:
    """A share as a sentence: its kind, CPUs and fraction, its quota, its speed."""
    kind = {"cpu_time": "CPU-time share", "cores": "share of the cores"}.get(
        str(share.get("kind")), f"{share.get('kind')} share"
    )
    cpus = format_cpulist([int(c) for c in share.get("cpus") or []])
    text = f"{kind}: CPUs {cpus}, fraction {share.get('fraction'):g}"
    if share.get("quota_us") and share.get("period_us"):
        text += f", quota {share['quota_us']} us every {share['period_us']} us"
    speed = share.get("speed") or {}
    if speed.get("effective") is not None:
        text += f", speed {float(speed['effective']):.3g} ({speed.get('method')})"
    return text
