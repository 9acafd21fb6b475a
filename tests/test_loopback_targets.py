"""Loopback spelled oddly (``127.1``, ``2130706433``, ``localhost.``, ``::ffff:127.0.0.1``)
is refused, as only 127.0.0.0/8, ::1 and ``localhost`` written out are loopback to
shrink; the error said "not a loopback address", which is wrong for each of them."""

from __future__ import annotations

import pytest
from helpers.resolver import resolving_localhost_to

from shrink.errors import ReplayError
from shrink.replay.live import LiveTarget

pytestmark = pytest.mark.compute


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("127.1", "127.1 is not an IP address or 'localhost'"),
        ("2130706433", "2130706433 is not an IP address or 'localhost'"),
        ("localhost.", "localhost. is not an IP address or 'localhost'"),
        (
            "::ffff:127.0.0.1",
            "::ffff:127.0.0.1 is an IPv4-mapped address, not read as loopback: write 127.0.0.1",
        ),
        ("10.1.2.3", "10.1.2.3 is not a loopback address"),
    ],
)
def test_an_odd_spelling_of_loopback_is_refused_saying_why(host, why):
    with pytest.raises(ReplayError) as err:
        LiveTarget([(host, 8080)])
    assert str(err.value).startswith(f"target {why}") and "--allow-remote" in str(err.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.255.0.9", "::1", "localhost"])
def test_loopback_written_out_is_taken(host, monkeypatch):
    # localhost as a stock /etc/hosts has it (a chroot may have no /etc/hosts at all)
    resolving_localhost_to(monkeypatch, "::1", "127.0.0.1")
    assert LiveTarget([(host, 8080)]).addresses == [(host, 8080)]


@pytest.mark.parametrize(
    ("addresses", "why"),
    [
        (("192.0.2.2", "::1"), "localhost resolves here to 192.0.2.2, not loopback (/etc/hosts)"),
        (("fd00::2",), "localhost resolves here to fd00::2, not loopback"),
        ((), "localhost does not resolve here"),
    ],
)
def test_localhost_that_resolves_off_loopback_is_refused(monkeypatch, addresses, why):
    """An /etc/hosts mapping ``localhost`` to this machine's eth0 address: both engines
    sent the load there (a server on 192.0.2.2 answered every request), unflagged."""
    resolving_localhost_to(monkeypatch, *addresses)
    with pytest.raises(ReplayError) as err:
        LiveTarget([("localhost", 8080)])
    assert str(err.value).startswith(f"target {why}") and "--allow-remote" in str(err.value)


def test_localhost_that_resolves_to_loopback_is_taken(monkeypatch):
    resolving_localhost_to(monkeypatch, "::1", "127.0.0.1")
    assert LiveTarget([("localhost", 8080)]).addresses == [("localhost", 8080)]


@pytest.mark.parametrize("allow_remote", [False, True])
@pytest.mark.parametrize(("host", "plain"), [("::1%lo", "::1"), ("127.0.0.1%lo", "127.0.0.1")])
def test_a_zone_on_loopback_is_refused_with_or_without_allow_remote(host, plain, allow_remote):
    # "http://[::1%lo]:P" was taken: the Python engine sent "Host: [::1%lo]:P" (no Host a
    # server need take), the native engine failed every request ("failed to lookup address
    # information"). It is this machine either way: --allow-remote is no answer to it.
    from shrink.wire import is_loopback, loopback_url_host

    with pytest.raises(ReplayError) as err:
        LiveTarget([(host, 8080)], allow_remote=allow_remote)
    assert str(err.value) == (
        f"target {host} names a zone (%lo), which a loopback address has none of: write {plain}"
    )
    assert not is_loopback(host)
    assert loopback_url_host("http://[::1%lo]:80/") is not None  # a recipe's health_url


def test_a_state_whose_replica_is_not_on_loopback_is_refused_naming_the_file(tmp_path):
    """An edited testbed state naming 10.0.0.1 was refused as if the user had typed it
    ("target 10.0.0.1 is not a loopback address; pass --allow-remote"), with no word of
    the file it came from."""
    import dataclasses

    from helpers.testbed import lighttpd_replica

    from shrink.testbed.state import TestbedState

    replica = dataclasses.replace(lighttpd_replica(8080), address="10.0.0.1")
    state = TestbedState(
        [replica], {"kind": "cores", "cpus": [1]}, {"name": "1-replica"},
        {"name": "m", "sockets": 1, "cores_per_socket": 2}, "doc", {"php": "8"}, "t",
    ).write(tmp_path / "tb.json")  # fmt: skip
    with pytest.raises(ReplayError) as err:
        LiveTarget.from_state(state)
    assert str(err.value).startswith(
        f"{state}: replica {replica.name}: target 10.0.0.1 is not a loopback"
    )


@pytest.mark.parametrize(
    ("host", "said"),
    [
        # getaddrinfo takes a numeric zone on any IPv6 address, and Linux's connect() reads
        # it only on a link-local one: 2001:db8::1%99 (no interface 99) was connected to
        (
            "2001:db8::1%2",
            r"Linux connects to 2001:db8::1 as if %2 were not there: write 2001:db8::1$",
        ),
        ("2001:db8::1%lo", r"the resolver refuses an interface name on it"),
        ("fec0::1%2", r"a zone picks the link of a scoped address \(RFC 4007\)"),
        # no zone at all: connect() refused it (EINVAL) for every request
        ("fe80::1", r"fe80::1 is link-local, .*name the interface .*fe80::1%INTERFACE"),
    ],
)
def test_a_zone_where_it_does_nothing_or_none_where_it_must_be_says_why(host, said):
    """Before: "names a zone (%2), which only a link-local address (fe80::/10) takes", not
    why; a link-local address without a zone was taken, and every request failed."""
    with pytest.raises(ReplayError, match=said):
        LiveTarget([(host, 8080)], allow_remote=True)


def test_a_loopback_health_url_with_a_zone_says_loopback_has_none():
    """Before: "host '::1%25lo' is not a loopback address" (RFC 6874's %25 kept)."""
    from shrink.wire import loopback_url_host

    for url in ("http://[::1%25lo]:80/", "http://[::1%252]:80/"):
        assert "which a loopback address has none of: write ::1" in loopback_url_host(url)
    assert (
        loopback_url_host("http://[fe80::1%25lo]:80/")
        == "host 'fe80::1%25lo' is not a loopback address"
    )


def test_a_link_local_target_with_a_zone_is_checked_and_its_host_header_has_none():
    """With --allow-remote, ``http://[fe80::1%eth0]:P``: both engines reach it (their
    address lookup, getaddrinfo, takes an interface of this machine as the zone), but
    both sent ``Host: [fe80::1%eth0]:P``, a zone the server cannot know and the Host
    header has no room for; a zone that is no interface here, or on an address that is
    not link-local, failed every request (the native engine: "failed to lookup address")."""
    from shrink.replay import EngineConfig, RunLogWriter, build_schedule, native
    from shrink.replay.live import parse_url
    from shrink.schedule import open_loop_trace

    LiveTarget([("fe80::1%lo", 8080)], allow_remote=True)  # lo: an interface everywhere
    assert parse_url("http://[fe80::1%25lo]:8080") == ("fe80::1%lo", 8080)  # RFC 6874's form
    with pytest.raises(ReplayError, match=r"zone %nosuch0, which is no network interface here"):
        LiveTarget([("fe80::1%nosuch0", 8080)], allow_remote=True)
    # a zone of digits not ASCII ("٢", Arabic-Indic two) was taken as interface 2, where
    # the resolver (both engines) knows no such zone; an empty one is said as empty
    with pytest.raises(ReplayError, match=r"zone %\u0662, which is no network interface here"):
        LiveTarget([("fe80::1%\u0662", 8080)], allow_remote=True)
    with pytest.raises(ReplayError, match=r"fe80::1% names an empty zone \(nothing after its %\)"):
        LiveTarget([("fe80::1%", 8080)], allow_remote=True)
    with pytest.raises(ReplayError, match=r"only a link-local address \(fe80::/10\) takes"):
        LiveTarget([("2001:db8::1%lo", 8080)], allow_remote=True)
    sched = build_schedule(open_loop_trace("/x", 10.0, 0.2), 1.0, 0.2, loop=False)
    cfg = EngineConfig(targets=[("fe80::1%lo", 8080)])
    sent = native._core_args(sched, cfg, RunLogWriter(None))["req_bytes"][0][0]
    assert b"\r\nHost: [fe80::1]:8080\r\n" in sent, sent


def test_an_address_off_loopback_is_not_said_to_be_another_machine():
    """A veth peer in a network namespace of this machine (10.242.42.2) was refused
    "...; pass --allow-remote to load another machine": it may be either."""
    with pytest.raises(ReplayError) as err:
        LiveTarget([("10.242.42.2", 8080)])
    assert str(err.value).endswith(
        "pass --allow-remote to load a server off this network namespace's loopback "
        "(another machine, or another network namespace of this one)"
    ), err.value


def test_an_ipv4_mapped_loopback_is_refused_where_python_reads_it_as_loopback(monkeypatch):
    # Python 3.13 (Debian 13's) answers is_loopback for ::ffff:127.0.0.1 as for 127.0.0.1:
    # the target was taken there and refused on 3.11 and 3.12. 3.13's reading, here:
    import ipaddress

    v6_loopback = ipaddress.IPv6Address.is_loopback
    monkeypatch.setattr(
        ipaddress.IPv6Address, "is_loopback",
        property(lambda ip: ip.ipv4_mapped.is_loopback if ip.ipv4_mapped else v6_loopback.fget(ip)),
    )  # fmt: skip
    assert ipaddress.ip_address("::ffff:127.0.0.1").is_loopback
    with pytest.raises(ReplayError, match="is an IPv4-mapped address, not read as loopback"):
        LiveTarget([("::ffff:127.0.0.1", 8080)])
