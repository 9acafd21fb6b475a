"""The testbed, run as root, trusts nothing it did not make: a recipe's health URL
stays on loopback, state files name only shrink's own cgroups and processes,
config values cannot break out of their quotes, run dirs are private, and two
``testbed up`` runs never share one."""

from __future__ import annotations

import pytest

from shrink.errors import RecipeError
from shrink.testbed.command import CommandRecipe


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/",
        "http://{address}:{port}@10.0.0.1/",
        "http://{address}@10.0.0.1:{port}/",
        "http://example.com:{port}/",
        "http://[::ffff:10.0.0.1]/",
    ],
)
def test_a_health_url_off_loopback_is_refused_by_parsing_alone(tmp_path, url):
    f = tmp_path / "r.toml"
    f.write_text(f'commands = [["srv"]]\nhealth_url = "{url}"\n')
    with pytest.raises(RecipeError) as err:
        CommandRecipe.read(f)
    msg = str(err.value)
    assert msg.startswith(f"recipe {f}: health_url: ") and "\n" not in msg


@pytest.mark.parametrize(
    "url", ["http://{address}:{port}/", "http://127.0.0.1:{port}/ok", "http://localhost:{port}/"]
)
def test_a_loopback_health_url_is_accepted(tmp_path, url):
    f = tmp_path / "r.toml"
    f.write_text(f'commands = [["srv"]]\nhealth_url = "{url}"\n')
    assert CommandRecipe.read(f).health_url == url


def test_a_health_url_filled_in_off_loopback_is_never_probed():
    r = CommandRecipe(name="r", source="r.toml", commands=[["srv"]])
    assert "not a loopback address, not probed" in (r.health("10.0.0.1", 80) or "")
