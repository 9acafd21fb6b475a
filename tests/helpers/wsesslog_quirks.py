"""A wsesslog file in every non-canonical syntax httperf accepts (what each line tests
is said beside it): read by the wsesslog reader's tests and, as golden input, by httperf."""

from __future__ import annotations

import re

__all__ = ["NON_CANONICAL", "with_thinks_scaled"]

NON_CANONICAL = (
    "\n\n# a comment in column 1\n"
    "/index.html think=2.5\n"
    "    /style.css\n"  # spaces instead of a tab
    "\t \t/img/logo.gif\n"
    '/app/search.php?q=shrink method=POSTX contents="q=shrink&page=1" think=1.25\n'
    "  /img/result.png\n"
    "\t"
    r"""/api/track method=PUTTY contents={\"event\":' "view", "note": '\"it\'s\ \\\ here\"}"""
    "\n"
    "/app/cart.php method=DELETE think=7\n"
    "    /dummy think=10\n"  # an embedded line sets its burst's think time; the last wins
    "/app/status.php method=HEADER   \n"
    "   \t  \n"
    "\n"
    "\n"
    "# several blank lines make one session break\n"
    "/ method=OPTIONS think=1e-3\r\n"
    "\t/form.php method=POST contents='line one\\\n"
    "line two\\r\\\n"
    "\\tindented  spaces'\n"
    "/debug method=TRACE\n"
    "\n"
    "   /caf%C3%A9/men%C3%BC.html contents=cr\\éme' 'brûlée"  # indented first line, no final LF
)


def with_thinks_scaled(text: str, factor: float) -> str:
    """``text`` with every ``think=`` time multiplied by ``factor`` (a quicker replay)."""
    return re.sub(r"think=([0-9.e+-]+)", lambda m: f"think={float(m[1]) * factor:g}", text)
