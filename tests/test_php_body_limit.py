"""A sweep of a trace whose request bodies the testbed's PHP would drop (issue 35)."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from shrink.cli._replay_opts import _warn_docroot
from shrink.errors import TestbedError
from shrink.trace import Trace


def _trace(body: bytes) -> Trace:
    cols = {"session": [0, 1], "t": [0.0, 0.5], "method": ["POST", "POST"],
            "path": ["/app/index.php", "/app/index.php"]}  # fmt: skip
    table = Trace.from_columns(cols).table.append_column(
        "body", pa.array([body, b"a=1"], pa.binary())
    )
    return Trace(table)


def test_a_body_over_the_testbeds_post_max_size_is_refused_before_a_run():
    # A testbed up without --trace runs PHP with post_max_size 8M: a 10 MB POST was
    # answered 200 with its body dropped, and the sweep measured it, exit 0.
    big = _trace(b"a=" + b"x" * (9 << 20))
    on_8m = SimpleNamespace(state={"php_post_max_mib": 8})
    with pytest.raises(TestbedError, match=r"body of 9,437,186 bytes, over .* \(8M\)"):
        _warn_docroot(on_8m, big, "t.parquet")
    _warn_docroot(SimpleNamespace(state={"php_post_max_mib": 20}), big, "t.parquet")
    _warn_docroot(SimpleNamespace(state={}), big, "t.parquet")  # a recipe file: no PHP known
    _warn_docroot(on_8m, _trace(b"a=" + b"x" * ((8 << 20) - 2)), "t.parquet")


def test_mat_adaptive_checks_the_body_limit_as_sweep_does(tmp_path, monkeypatch):
    # `mat --adaptive --target STATE` added levels with no check of PHP's body limit.
    from helpers.fake_targets import steady_trace
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.cli._replay_opts import EngineOptions
    from shrink.measure import sweep
    from shrink.replay import adaptive
    from shrink.target import FakeTarget

    curve = sweep(FakeTarget(servers=1, demand={"static": 0.001}), steady_trace(), [3, 9.5],
                  reps=2, warmup=0.5, duration=2, seed=1)  # fmt: skip
    curve.write_json(tmp_path / "c.json")
    _trace(b"a=" + b"x" * (9 << 20)).write_parquet(tmp_path / "t.parquet")
    made = SimpleNamespace(state={"php_post_max_mib": 8})
    monkeypatch.setattr(EngineOptions, "target", lambda self, t, **k: made)
    monkeypatch.setattr(adaptive, "other_testbed", lambda lc, tgt: None)
    monkeypatch.setattr(adaptive, "refine", lambda *a, **k: pytest.fail("a level was run"))
    args = ["mat", str(tmp_path / "c.json"), "--adaptive", "--trace", str(tmp_path / "t.parquet"),
            "--target", str(tmp_path / "s.json"), "--threshold", "5ms"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "over the testbed's PHP post_max_size (8M)" in result.output
