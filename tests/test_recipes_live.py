"""Each server recipe on this machine: up pinned, serving static files and PHP, down clean.

The built-in stacks (lighttpd + php-cgi, nginx + PHP-FPM) under every mapping; a
user's recipe file running ``python3 -m http.server``; broken recipe files; and
``shrink predict --server nginx-php-fpm`` checked by ``shrink validate``, on a tiny
trace. Each test starts its own servers on free loopback ports and stops them by PID.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import httpx
import pytest
from conftest import require_root
from helpers.testbed import assert_replicas_serve, running_under, write_docroot
from typer.testing import CliRunner

from shrink import processes as process
from shrink.cli import app
from shrink.mapping import BUILTIN_MAPPINGS
from shrink.share import Share
from shrink.testbed import ServerSettings, down, status, up
from shrink.testbed.nginx import php_fpm_names
from shrink.testbed.state import TestbedState

pytestmark = pytest.mark.live

SBIN = "/usr/sbin:/usr/bin:/usr/local/sbin:/sbin"
NEEDS = {
    "lighttpd-php-cgi": ("lighttpd", "php-cgi"),
    "nginx-php-fpm": ("nginx", "php-fpm*"),
}
POOL = {"lighttpd-php-cgi": "php-cgi", "nginx-php-fpm": "php-fpm"}


def _require(recipe: str) -> None:
    for tool in NEEDS[recipe]:
        names = php_fpm_names() if tool == "php-fpm*" else [tool]
        if not any(shutil.which(n, path=SBIN) for n in names):
            pytest.skip(f"{tool} is not installed (make setup installs it as root)")


@pytest.fixture
def docroot(tmp_path: Path) -> Path:
    return write_docroot(tmp_path, '<?php echo "page:" . getmypid();\n')


def _assert_nothing_left(st: TestbedState, tmp_path: Path) -> None:
    assert [p for r in st.replicas for p in r.pids if process.is_alive(p)] == []
    assert running_under(tmp_path) == []
    for r in st.replicas:
        if r.cgroup:
            assert not any(Path(d).exists() for d in r.cgroup["dirs"].values())


@pytest.mark.parametrize("mapping", BUILTIN_MAPPINGS)
@pytest.mark.parametrize("recipe", ["lighttpd-php-cgi", "nginx-php-fpm"])
def test_builtin_recipe_serves_pinned_and_stops(docroot, machine, tmp_path, recipe, mapping):
    _require(recipe)
    state = tmp_path / "state.json"
    st = up(docroot, machine, Share.all_of(machine), mapping, state_path=state, port=0,
            server=ServerSettings(recipe))  # fmt: skip
    try:
        assert st.server["name"] == recipe and all(st.versions.values())
        assert_replicas_serve(st, POOL[recipe])
        for r in st.replicas:
            for p in r.pids:  # every process inside the replica's CPUs
                assert set(process.allowed_cpus(p)) <= set(r.cpus), (p, r.cpus)
            for p, cpus in r.pinned.items():
                assert process.allowed_cpus(p) == tuple(cpus)
            front = [p for p in r.processes[recipe.split("-")[0]] if p not in r.masters]
            workers = front or r.masters[:1]
            assert sorted(r.pinned[w][0] for w in workers) == sorted(r.cpus)  # one per core
            kids = [p for p in r.processes[POOL[recipe]] if p in r.pinned]
            per_core = [sum(1 for k in kids if r.pinned[k] == [c]) for c in r.cpus]
            assert max(per_core) - min(per_core) <= 1 and sum(per_core) == len(kids) >= 1
        assert all(s.ok for s in status(state))
    finally:
        down(state)
    _assert_nothing_left(st, tmp_path)


@pytest.mark.root
def test_nginx_on_a_cpu_time_share_has_every_process_in_the_quota(docroot, machine, tmp_path):
    require_root()
    _require("nginx-php-fpm")
    cpu = machine.all_cpus[-1]
    state = tmp_path / "state.json"
    st = up(docroot, machine, Share.parse(f"{cpu}@25%", machine), state_path=state, port=0,
            server=ServerSettings("nginx-php-fpm"))  # fmt: skip
    try:
        (r,) = st.replicas
        cg = Path(r.cgroup["dirs"]["cpu"])
        quota = (cg / ("cpu.cfs_quota_us" if r.cgroup["version"] == 1 else "cpu.max")).read_text()
        assert int(quota.split()[0]) == Share.from_dict(st.share).quota_us()
        members = {int(p) for p in (cg / "cgroup.procs").read_text().split()}
        assert set(r.pids) <= members and len(r.processes["nginx"]) == 2  # master + worker
        assert httpx.get(f"http://{r.address}:{r.port}/app/page.php", trust_env=False).is_success
    finally:
        down(state)
    _assert_nothing_left(st, tmp_path)


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "recipes" / "python-http.toml"


def test_a_recipe_file_running_python_http_server(docroot, machine, tmp_path, monkeypatch):
    """The README's example recipe, examples/recipes/python-http.toml, as it is."""
    from shrink.testbed.private import can_run, server_user

    if not can_run(shutil.which("python3") or "/nonexistent", server_user()):
        # As root the server runs as www-data, who cannot reach a python3 in root's home.
        monkeypatch.setenv("PATH", "/usr/bin:" + os.environ.get("PATH", ""))
    if not can_run(shutil.which("python3") or "/nonexistent", server_user()):
        pytest.skip("no python3 on PATH that the server user may run")
    recipe = tmp_path / "python-http.toml"
    shutil.copy(EXAMPLE, recipe)
    state = tmp_path / "tb.json"
    runner = CliRunner()
    r = runner.invoke(app, ["testbed", "up", "--server", str(recipe), "--mapping",
                            "2-replica-direct", "--docroot", str(docroot), "--state", str(state),
                            "--port", "0"])  # fmt: skip
    st = TestbedState.read(state) if state.exists() else None
    try:
        assert r.exit_code == 0, r.output
        assert "server python-http: Python 3." in r.stdout
        assert st is not None and st.server["source"] == str(recipe)
        for rep in st.replicas:
            got = httpx.get(f"http://{rep.address}:{rep.port}/static/file1k.bin", trust_env=False)
            assert got.content == bytes(range(256)) * 4
            assert process.allowed_cpus(rep.master_pid) == tuple(rep.cpus)
        r = runner.invoke(app, ["testbed", "status", "--state", str(state), "--json"])
        assert r.exit_code == 0 and json.loads(r.stdout)["server"]["name"] == "python-http"
    finally:
        r = runner.invoke(app, ["testbed", "down", "--state", str(state)])
    assert r.exit_code == 0, r.output
    assert st is not None
    _assert_nothing_left(st, tmp_path)


@pytest.mark.parametrize(
    ("commands", "what"),
    [
        ('[["no-such-server-xyz", "{port}"]]', r"commands\[0\]: program 'no-such-server-xyz' not"),
        ('[["sleep", "30"]]', r"replica r0 \(127\.0\.0\.1:\d+\): no healthy answer .* within 1 s"),
        (
            '[["sh", "-c", "echo missing config; exit 3"]]',
            r"replica r0 .*: sh exited with status 3 during start-up .*missing config",
        ),
    ],
    ids=["bad-command", "never-answers", "dies-at-start"],
)
def test_a_broken_recipe_is_one_line_and_leaves_nothing(docroot, tmp_path, commands, what):
    recipe = tmp_path / "broken.toml"
    recipe.write_text(f"commands = {commands}\nstart_timeout = 1\n")
    state = tmp_path / "tb.json"
    r = CliRunner().invoke(app, ["testbed", "up", "--server", str(recipe), "--docroot",
                                 str(docroot), "--state", str(state), "--port", "0"])  # fmt: skip
    assert r.exit_code == 1
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and f"recipe {recipe}: " in lines[0], r.output
    assert re.search(what, lines[0]), lines[0]
    assert "Traceback" not in r.output and not state.exists()
    assert running_under(tmp_path) == []


def test_predict_on_nginx_and_validate_against_the_whole_core(tmp_path):
    """The recipe carried through predict and validate: its name and versions in the
    prediction, the curves, the validation and the report. Three short levels a side
    are enough for that (a MAT may be only a bound, exit 99); how close a prediction
    comes is checked on the simulator and the fakes, where it is deterministic."""
    _require("nginx-php-fpm")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a CPU for the generator and one for the server")
    runner = CliRunner()
    r = runner.invoke(app, ["synth", "support", "--users", "40", "--duration", "30", "--seed",
                            "1", "-o", str(tmp_path / "t.parquet"), "--docroot",
                            str(tmp_path / "doc")])  # fmt: skip
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = runner.invoke(app, ["predict", str(tmp_path / "t.parquet"), "--server", "nginx-php-fpm",
                            "--docroot", str(tmp_path / "doc"), "--alpha", "0.5",
                            "--mappings", "1-replica", "--share-kind", "cpu_time", "--warmup",
                            "0.5", "--duration", "1.5", "--reps", "1", "--max-levels", "3",
                            "--skip", "0", "--thresholds", "mean=10ms,p999=500ms",
                            "--no-calibrate", "-o",
                            str(out)])  # fmt: skip
    _skip_if_the_host_starved_the_generator(r.output)
    assert r.exit_code in (0, 99), r.output  # 99: a MAT is only a bound (3 short levels)
    pred = json.loads((out / "prediction.json").read_text())
    assert pred["server"]["name"] == "nginx-php-fpm" and pred["inputs"]["server"] == "nginx-php-fpm"
    assert pred["server"]["versions"]["nginx"].startswith("nginx/")
    assert "PHP" in pred["server"]["versions"]["php-fpm"]
    assert "server nginx-php-fpm" in (out / "report.md").read_text()
    curve = json.loads((out / "measured-curve.json").read_text())
    assert curve["meta"]["target"]["server"]["name"] == "nginx-php-fpm"
    r = runner.invoke(app, ["validate", str(out / "prediction.json"), "--full-run", "run"])
    _skip_if_the_host_starved_the_generator(r.output)
    assert r.exit_code in (0, 99), r.output  # 99: a MAT is only a bound (3 short levels)
    v = json.loads((out / "validation.json").read_text())
    assert v["meta"]["server"]["name"] == "nginx-php-fpm"
    assert v["meta"]["server_versions"]["nginx"].startswith("nginx/")
    full = json.loads((out / "full-curve.json").read_text())
    assert full["alpha"] == 1.0 and full["meta"]["target"]["share"]["cpu_fraction"] == 1.0
    assert running_under(tmp_path) == []


def _skip_if_the_host_starved_the_generator(output: str) -> None:
    """A sweep with no usable level says the load generator fell behind at every level:
    other work on a shared host, not the recipe (a tiny trace has few levels to spare)."""
    for sign in ("no usable level", "no level has a finite throughput"):
        if sign in output:
            pytest.skip(f"the host starved the load generator: {output.strip().splitlines()[-1]}")
