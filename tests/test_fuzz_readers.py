"""Every reader under seeded mutation: only shrink's errors, no hang, no big memory.

A few hundred inputs per reader (a few seconds each); bench/bench_fuzz.py runs the
long campaign. The harness is tests/helpers/fuzzing.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.fuzzing import READERS, SHARED, campaign, peak_rss_mib, reset_peak_rss

pytestmark = pytest.mark.compute

INPUTS = 300
LIMIT_S = 5.0  # an input past this is a hang (the slowest seen on a busy 2-core VM: 0.7 s)


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_survives_mutation(name: str, tmp_path: Path) -> None:
    if name == "capture" and not (SHARED / "data" / "real").is_dir():
        pytest.skip(f"real captures not found under {SHARED} (set SHRINK_SHARED)")
    # From the RSS now, not pytest's peak so far: an input's growth under that was unseen.
    before = reset_peak_rss() or peak_rss_mib()
    out = campaign(READERS[name], INPUTS, seed=17, tmp=tmp_path, limit_s=LIMIT_S)
    assert out.inputs == INPUTS
    assert not out.crashes, f"{len(out.crashes)} crashes, first: {out.crashes[0]}"
    assert not out.hangs, f"inputs {out.hangs} ran past {LIMIT_S} s"
    # Bounds in the schemas keep a hostile size from allocating: no input may grow the
    # process by more than a few hundred MiB (sockets = 10**8 once took 5.7 GiB).
    assert out.peak_rss_mib - before < 512
    # Not everything is refused at the door: some inputs reach the later stages.
    assert out.errors < INPUTS


def test_mutations_are_seeded(tmp_path: Path) -> None:
    import random

    from helpers.fuzzing import mutate, mutate_json

    data = b'{"a": [1, 2, {"b": "x"}], "c": 3.5}'
    runs = [[f(data, random.Random(5)) for f in (mutate, mutate_json)] for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0] != [f(data, random.Random(6)) for f in (mutate, mutate_json)]


@pytest.mark.parametrize(
    "share",
    [
        {"kind": "cpu_time", "cpus": [0], "cpu_fraction": float("nan"), "period_us": 100_000},
        {"kind": "cpu_time", "cpus": [0], "cpu_fraction": 0.5, "period_us": "x"},
    ],
)
def test_a_curves_share_that_no_quota_can_come_from_is_refused(share, tmp_path: Path) -> None:
    """Found at 100,000 inputs (bench_fuzz.py): a NaN cpu_fraction was a ValueError."""
    import json

    from shrink.errors import ShrinkError

    reader = READERS["loadcurve"]
    doc = json.loads(reader.seeds(tmp_path)[0])
    doc["share"] = share
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ShrinkError, match=r"curve\.json: share\.(cpu_fraction|period_us)"):
        reader.read(path)


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"masters": None}, None),  # master_pid stands in
        ({"masters": []}, r"masters"),
        ({"processes": None, "lighttpd_pids": [10], "php_pids": [11, 12]}, None),
    ],
)
def test_a_state_field_written_as_null_or_empty(change, refused, tmp_path: Path) -> None:
    """Found at 100,000 inputs (bench_fuzz.py): ``masters: null`` (with master_pid) was a
    TypeError, ``masters: []`` an IndexError, ``processes: null`` an AttributeError."""
    import json

    from shrink.errors import ShrinkError

    reader = READERS["state"]
    doc = json.loads(reader.seeds(tmp_path)[0])
    doc["replicas"][0].update(change)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(doc))
    if refused is None:
        reader.read(path)
    else:
        with pytest.raises(ShrinkError, match=refused):
            reader.read(path)


def test_a_hang_of_a_long_campaign_can_be_read_again_alone(tmp_path: Path) -> None:
    from helpers.fuzzing import Reader, mutate_json

    seen: list[bytes] = []
    reader = Reader("probe", ".json", lambda tmp: [b'{"a": [1, 2], "b": "x"}'],
                    lambda p: seen.append(p.read_bytes()), mutate_json)  # fmt: skip
    campaign(reader, 12, seed=3, tmp=tmp_path)
    whole = list(seen)
    seen.clear()
    out = campaign(reader, 12, seed=3, tmp=tmp_path, only=frozenset({4, 9}))
    assert seen == [whole[4], whole[9]]  # the same inputs, and no other read
    assert [k for k, _, _ in out.timings] == [4, 9]


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_survives_the_new_states(name: str, tmp_path: Path) -> None:
    """The seeds and mutators of helpers.fuzz_states (bench_fuzz.py --states): real traces,
    compressed and spliced inputs, byte order marks, CR line ends, odd link and block
    types, mistyped Parquet columns, odd TOML. A few inputs each; the bench runs many."""
    from helpers import fuzz_states
    from helpers.fuzzing import mutate

    fuzz_states.splice_pool({k: r for k, r in READERS.items() if k != name}, tmp_path)
    reader = fuzz_states.with_states(READERS[name], SHARED, mutate)
    out = campaign(reader, 60, seed=27, tmp=tmp_path, limit_s=LIMIT_S)
    assert out.inputs == 60
    assert not out.crashes, f"{len(out.crashes)} crashes, first: {out.crashes[0]}"
    assert not out.hangs, f"inputs {out.hangs} ran past {LIMIT_S} s"
    assert all("set_int_max_str_digits" not in m for m in out.messages)
