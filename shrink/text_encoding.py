"""What a file that is not UTF-8 text is, told by its first bytes: compressed, a
binary, or text in a wider encoding (UTF-16 or UTF-32, with or without a byte-order
mark), with what to run to read it. "Not UTF-8 text" alone read as damage."""

from __future__ import annotations

__all__ = ["HINTS", "utf16_without_bom", "utf32"]

# What a file that is not UTF-8 text is, told by its first bytes: "not UTF-8 text" alone
# read as damage for a file that was only compressed or saved as UTF-16.
HINTS = (
    (b"PAR1", " (a binary file, e.g. Parquet?)"),
    (b"\x1f\x8b", " (gzip-compressed: gunzip it first)"),
    (b"BZh", " (bzip2-compressed: bunzip2 it first)"),
    (b"\xfd7zXZ\x00", " (xz-compressed: xz -d it first)"),
    (b"\x28\xb5\x2f\xfd", " (zstd-compressed: zstd -d it first)"),
    (b"\xff\xfe", " (UTF-16 text: convert it to UTF-8 first)"),
    (b"\xfe\xff", " (UTF-16 text: convert it to UTF-8 first)"),
)


def utf32(head: bytes) -> str | None:
    """What a file that starts with ``head`` is, when it is UTF-32 text, with or without
    a byte-order mark, with what to run to read it; else None.

    Without a mark such bytes are valid UTF-8 (each letter three NULs and itself), so
    they were read as text with NULs; with one (FF FE 00 00) the file was named UTF-16.
    Judged by the first 4 KiB, in groups of four: the top byte (no code point reaches
    it) NUL in each, the next NUL in at least 9 of 10 (the planes past the first are
    rare), the low byte NUL in at most 1 of 10 (a letter's own byte). Bytes of that
    shape that do not read as text (:func:`_reads_as_text`: small int32s of a binary
    file, say) are called binary data, not UTF-32.
    """
    for mark, order in ((b"\xff\xfe\x00\x00", "LE"), (b"\x00\x00\xfe\xff", "BE")):
        if head.startswith(mark):
            return (
                f"UTF-32 text ({order}, with a byte-order mark): convert it to UTF-8 first "
                "(iconv -f UTF-32 -t UTF-8)"
            )
    sample = head[:4096]
    sample = sample[: len(sample) & ~3]
    quads = len(sample) // 4
    if quads < 2:
        return None
    for order, (top, next_, low) in (("LE", (3, 2, 0)), ("BE", (0, 1, 3))):
        if (
            sample[top::4].count(0) == quads
            and sample[next_::4].count(0) * 10 >= quads * 9
            and sample[low::4].count(0) * 10 <= quads
        ):
            if (reads := _reads_as_text(sample, order)) is False:
                return (
                    "binary data, not text: its bytes come in groups of four as UTF-32's "
                    "do, but they do not read as text"
                )
            if reads is None:  # (a JSON line of 1,422 characters was called binary)
                return (
                    f"binary data, or UTF-32 text without a byte-order mark ({order}) with "
                    "no line break in its first 1,024 characters: if it is text, convert "
                    f"it to UTF-8 first (iconv -f UTF-32{order} -t UTF-8)"
                )
            return (
                f"UTF-32 text without a byte-order mark ({order}): convert it to UTF-8 first "
                f"(iconv -f UTF-32{order} -t UTF-8)"
            )
    return None


def _reads_as_text(sample: bytes, order: str) -> bool | None:
    """Whether ``sample`` (whole groups of four) decodes as UTF-32 in ``order`` and reads
    as text: at most 1 character in 50 neither printable nor a tab or line break, and,
    in a sample of 1,024 characters (4 KiB, not the whole of a short file), a line
    break. A binary of small int32s (1, 2, 3, ...) decodes, but 1 character in 14 of it is
    control characters, the unassigned and the private: it was called UTF-32 text.
    None where only the line break is missing: a long JSON line reads so, and it is
    not told from binary data."""
    try:
        text = sample.decode(f"utf-32-{order.lower()}")
    except UnicodeDecodeError:
        return False
    odd = sum(1 for c in text if not c.isprintable() and c not in "\t\n\r")
    if odd * 50 > len(text):
        return False
    return len(text) < 1024 or "\n" in text or "\r" in text or None


def utf16_without_bom(head: bytes) -> str | None:
    """What a file that starts with ``head`` is, when every other byte is NUL: UTF-16
    text without a byte-order mark (LE when the NULs come second), with what to run to
    read it; else None.

    Such bytes are valid UTF-8, so they were read as text: a log's every line skipped
    as unreadable or quoted with a \\x00 between its letters, a session log's path
    refused for its NUL, a JSON or TOML file refused at line 1 ("Expecting value").
    Judged by the first 4 KiB: one byte of each two NUL in at least 9 pairs of 10,
    the other byte NUL in at most 1 of 10 (a letter outside Latin-1 has no NUL).
    """
    sample = head[:4096]
    sample = sample[: len(sample) & ~1]
    pairs = len(sample) // 2
    if pairs < 2:
        return None
    first, second = sample[0::2].count(0), sample[1::2].count(0)
    for nul, other, order in ((second, first, "LE"), (first, second, "BE")):
        if nul * 10 >= pairs * 9 and other * 10 <= pairs:
            return (
                f"UTF-16 text without a byte-order mark ({order}: every other byte is NUL): "
                f"convert it to UTF-8 first (iconv -f UTF-16{order} -t UTF-8)"
            )
    return None
