"""The live tests' and benchmarks' own lighttpd config (helpers.servers.static_lighttpd).
lighttpd 1.4.79 (Debian 13) reads server.max-keep-alive-requests and its kin as short
integers and exits 255 on a larger value, where 1.4.69 (Debian 12) took one: the live
tests' lighttpd (max-keep-alive-requests = 100000) never started there, and the stderr
the tests send to /dev/null said why. The helper now refuses such a value on every
lighttpd, so a test or benchmark written on an older one fails where it is written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.servers import LIGHTTPD_SHORT_MAX, static_lighttpd


@pytest.mark.compute
@pytest.mark.parametrize("key", ["max_keep_alive_requests", "max_keep_alive_idle", "max_fds"])
def test_a_setting_lighttpd_reads_as_a_short_integer_is_refused_above_its_range(
    tmp_path: Path, key: str
) -> None:
    with pytest.raises(ValueError, match=r"server\.max-.* = 100000: lighttpd takes 0 \.\.\. 65535"):
        static_lighttpd(tmp_path, **{key: 100000})


@pytest.mark.compute
def test_the_largest_short_is_written_as_given(tmp_path: Path) -> None:
    conf, _ = static_lighttpd(tmp_path, max_keep_alive_requests=LIGHTTPD_SHORT_MAX)
    assert "server.max-keep-alive-requests = 65535\n" in conf.read_text()


def test_the_installed_lighttpd_takes_the_largest_short(tmp_path: Path) -> None:
    lighttpd = shutil.which("lighttpd") or "/usr/sbin/lighttpd"
    if not Path(lighttpd).exists():
        pytest.skip("lighttpd is not installed (make setup installs it as root)")
    conf, _ = static_lighttpd(tmp_path, max_keep_alive_requests=LIGHTTPD_SHORT_MAX,
                              max_keep_alive_idle=LIGHTTPD_SHORT_MAX)  # fmt: skip
    res = subprocess.run([lighttpd, "-tt", "-f", str(conf)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
