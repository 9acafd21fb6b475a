"""The native core's own unit tests (``cargo test`` in native/): the response framing
cases (native/src/http.rs) and the send window's adaptation (native/src/engine.rs)
run with the suite, not only when someone remembers to run them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parent.parent / "native"


def _cargo() -> str | None:
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "bin" / "cargo"
    return shutil.which("cargo") or (str(home) if home.is_file() else None)


@pytest.mark.compute
def test_the_native_cores_unit_tests_pass() -> None:
    cargo = _cargo()
    if cargo is None:
        pytest.skip("no cargo (Rust): the native core is not built here either")
    env = {
        **os.environ,
        # pyo3's build finds the Python it links against on PATH: the suite's own
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "CARGO_TARGET_DIR": str(NATIVE / "target"),
    }
    r = subprocess.run(
        [cargo, "test", "--quiet"], cwd=NATIVE, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout[-4000:], r.stderr[-4000:])
    assert "test result: ok" in r.stdout and " 0 failed" in r.stdout, r.stdout[-2000:]
