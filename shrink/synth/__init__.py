"""Synthetic workloads and the document root they are served from.

* :func:`synth_tcp` - one static 1 KB file, open-loop at a rate (Hashemian et
  al.'s network-bound workload).
* :func:`synth_support` - SPECweb2009-Support-like sessions of dynamic PHP
  pages, images and downloads for N concurrent users; every assumption is a
  field of :class:`SupportParams`.
* :func:`support_docroot` / :func:`tcp_docroot` - the files, PHP pages and
  ``manifest.json`` a testbed serves them from.
"""

from __future__ import annotations

from shrink.synth.docroot import (
    MANIFEST_SCHEMA,
    DocrootReport,
    missing_paths,
    read_manifest,
    support_docroot,
    tcp_docroot,
    write_docroot,
)
from shrink.synth.support import (
    DOWNLOAD_CLASSES,
    PAGES,
    STATES,
    SupportParams,
    SupportSite,
    build_site,
    expected_dynamic_fraction,
    images_per_page,
    synth_support,
    visits_per_session,
)
from shrink.synth.tcp import TCP_BYTES, TCP_PATH, synth_tcp

__all__ = [
    "DOWNLOAD_CLASSES",
    "MANIFEST_SCHEMA",
    "PAGES",
    "STATES",
    "TCP_BYTES",
    "TCP_PATH",
    "DocrootReport",
    "SupportParams",
    "SupportSite",
    "build_site",
    "expected_dynamic_fraction",
    "images_per_page",
    "missing_paths",
    "read_manifest",
    "support_docroot",
    "synth_support",
    "synth_tcp",
    "tcp_docroot",
    "visits_per_session",
    "write_docroot",
]
