"""What a stopped command says it kept: "kept" is the word for saved measurements.

A live predict that failed at its first level (a sparse log: "the loop window holds no
request") ended "; kept out/runs/testbed-0.json": the state file of the testbed it had
already brought down, which holds nothing measured.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from shrink.atomic import recording, write_text
from shrink.cli._kept import kept_words
from shrink.errors import ShrinkError
from shrink.providers import TestbedProvider
from shrink.share import Share

pytestmark = pytest.mark.compute


@contextmanager
def _provider(tmp_path, monkeypatch):
    """A testbed provider whose up and down only write the state file, as theirs do."""
    import shrink.testbed
    from shrink.replay.live import LiveTarget

    monkeypatch.setattr(
        shrink.testbed, "up", lambda *a, state_path, **k: write_text(state_path, '{"up": 1}')
    )
    monkeypatch.setattr(shrink.testbed, "down", lambda p: write_text(p, '{"stopped": 1}'))
    target = SimpleNamespace(close=lambda: None)  # (a target lets go of its testbed)
    monkeypatch.setattr(LiveTarget, "from_state", classmethod(lambda cls, p, **k: target))
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "private"))  # (no testbed of others)
    provider = TestbedProvider.__new__(TestbedProvider)  # no server is started
    provider.run_dir, provider._opened = tmp_path / "out" / "runs", 0
    provider.docroot = provider._machine = provider.server = provider.generator = None
    provider.recipe = None  # (the start bound then is the default one)
    provider.engine = {}
    yield provider


def test_a_predict_stopped_before_it_measured_says_nothing_measured_was_kept(tmp_path, monkeypatch):
    with (
        _provider(tmp_path, monkeypatch) as provider,
        recording() as written,
        pytest.raises(ShrinkError),
        provider.open(Share.whole([0]), "1-replica"),
    ):
        raise ShrinkError("the loop window holds no request to replay")
    assert (tmp_path / "out" / "runs" / "testbed-0.json").is_file()  # still there
    assert kept_words((), written) == "; nothing measured was kept"


def test_what_was_measured_is_still_named_and_the_testbed_state_is_not(tmp_path, monkeypatch):
    curve = tmp_path / "out" / "measured-curve.partial.json"
    with (
        _provider(tmp_path, monkeypatch) as provider,
        recording() as written,
        pytest.raises(ShrinkError),
        provider.open(Share.whole([0]), "1-replica"),
    ):
        write_text(curve, "{}")
        raise ShrinkError("stopped")
    assert kept_words((), written) == f"; kept {curve}"


def test_a_testbed_not_brought_down_is_named_as_kept(tmp_path, monkeypatch):
    """Its state is what ``testbed down`` needs: still named."""
    import shrink.testbed

    with _provider(tmp_path, monkeypatch) as provider, recording() as written:
        monkeypatch.setattr(shrink.testbed, "down", lambda p: (_ for _ in ()).throw(OSError()))
        with pytest.raises(OSError), provider.open(Share.whole([0]), "1-replica"):
            pass
    state = tmp_path / "out" / "runs" / "testbed-0.json"
    assert kept_words((), written) == f"; kept {state}"


def test_a_command_that_wrote_nothing_says_nothing():
    assert kept_words((), []) == ""


def test_a_stopped_commands_last_line_imports_nothing_heavy(tmp_path):
    """A SIGTERM landing while numpy was being imported stopped ``trace info`` with an
    ImportError's traceback ("cannot load module more than once per process"): its last
    line, naming what was kept, imported shrink.measure, and numpy with it, again."""
    import subprocess
    import sys

    written = tmp_path / "w.json"
    written.write_text("{}")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from shrink.cli._kept import kept_files, kept_words\n"
        f"print(kept_words([], [Path({str(written)!r})]), kept_files([], []))\n"
        "print(sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'shrink.measure')"
        " if m in sys.modules))\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True, cwd=root)  # fmt: skip
    said, heavy = out.stdout.splitlines()
    assert said.startswith("; kept ") and heavy == "[]", out.stdout
