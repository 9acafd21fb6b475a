"""A trace's path with "." or ".." segments: both stacks take them out before anything
else (nginx after decoding, "/%2e%2e/" too). The docroot check read "/a/../b.html" as a
hidden path (a 403) although both serve b.html, and missed the symlink of
"/nosuch/../latest.html" (a 403) on the missing "nosuch"."""

from __future__ import annotations

import os

import pytest

from shrink.testbed.coverage import docroot_coverage
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _coverage(root, paths):
    tr = Trace.from_columns({"session": [0] * len(paths), "t": [0.0] * len(paths), "path": paths})
    return docroot_coverage(tr, root)


def test_dot_segments_are_taken_out_before_the_path_is_looked_up(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b.html").write_text("b")
    (tmp_path / "index.html").write_text("i")
    paths = ["/a/../b.html", "/./b.html", "/a/%2e%2e/b.html", "/a/..", "/a/./../b.html?x=/.."]
    cov = _coverage(tmp_path, paths)
    assert cov.missing == [], cov.warning("t")


def test_a_symlink_behind_a_dot_dot_segment_is_said_as_one(tmp_path):
    (tmp_path / "v2.html").write_text("2")
    os.symlink("v2.html", tmp_path / "latest.html")
    cov = _coverage(tmp_path, ["/nosuch/../latest.html", "/x/./../latest.html"])
    assert len(cov.missing) == 2 and cov.symlinked == 2, cov
    said = cov.warning("t")
    assert said is not None and "the 2 reached through a symlink" in said and "hidden" not in said


def test_a_path_above_the_docroot_is_missing_and_not_hidden(tmp_path):
    (tmp_path / "b.html").write_text("b")
    cov = _coverage(tmp_path, ["/../b.html", "/%2e%2e/b.html"])
    assert len(cov.missing) == 2, cov
    said = cov.warning("t")
    assert said is not None and "hidden" not in said, said
