"""A real lighttpd + php-cgi serves a synthetic docroot: every sampled path answers its bytes."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers.servers import free_port, wait_listening

from shrink.synth import SupportParams, build_site, support_docroot, synth_support
from tests.conftest import require_tool

pytestmark = pytest.mark.live


def test_lighttpd_serves_trace_paths_with_their_sizes(tmp_path: Path):
    lighttpd = require_tool("lighttpd")
    php = require_tool("php-cgi")
    params = SupportParams(max_download_bytes=200_000).scaled(work_us=200, mem_kib=128)
    site = build_site(params, 160)
    docroot = tmp_path / "docroot"
    support_docroot(docroot, site)
    trace = synth_support(160, 60, seed=5, params=params, site=site)
    paths, nbytes = trace.column("path"), trace.column("bytes")
    rng = np.random.default_rng(0)
    dyn = np.flatnonzero(trace.column("cls") == "dynamic")
    sample = np.r_[rng.choice(dyn, 10, replace=False), rng.choice(len(trace), 30, replace=False)]
    port = free_port()
    conf = tmp_path / "lighttpd.conf"
    conf.write_text(
        f'server.document-root = "{docroot}"\n'
        f"server.port = {port}\n"
        'server.bind = "127.0.0.1"\n'
        'server.modules = ("mod_fastcgi")\n'
        f'server.errorlog = "{tmp_path / "error.log"}"\n'
        f'fastcgi.server = (".php" => (("bin-path" => "{php}", '
        f'"socket" => "{tmp_path / "php.sock"}", "max-procs" => 1, '
        '"bin-environment" => ("PHP_FCGI_CHILDREN" => "1"))))\n'
    )
    proc = subprocess.Popen([lighttpd, "-D", "-f", str(conf)], stderr=subprocess.PIPE)
    try:
        wait_listening(port, proc)
        for i in sample:
            url = f"http://127.0.0.1:{port}{paths[i]}"
            with urllib.request.urlopen(url, timeout=10) as reply:
                body = reply.read()
                assert reply.status == 200, url
            assert len(body) == nbytes[i], url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
