//! The least response parsing a load generator needs (a port of shrink/replay/_http.py
//! and the parser states of _conn.py): status, length (Content-Length, chunked, or up
//! to the close) and whether the connection stays open; the body is counted, never kept.

pub const HEAD_LIMIT: usize = 65536;

/// (status, content length or -1, chunked, close) of a head without its CRLFCRLF, framed
/// as RFC 9112 section 6.3 says: Transfer-Encoding wins over Content-Length (whose length
/// is then -1) and closes the connection after the answer; chunked only when it is the
/// final coding (a body up to the close otherwise); Content-Length values (several lines,
/// or a list) must all be the same number. None: not HTTP, or an unrecoverable framing
/// error (the connection is closed). The same rules as shrink/replay/_http.py.
pub fn parse_head(head: &[u8]) -> Option<(i32, i64, bool, bool)> {
    if !head.starts_with(b"HTTP/1.") || head.len() < 12 || head[8] != b' ' {
        return None;
    }
    if head.len() > 12 && head[12] != b' ' && head[12] != b'\r' {
        return None;
    }
    let status = parse_int(&head[9..12], 10)? as i32;
    if !(100..=599).contains(&status) {
        return None;
    }
    let lower: Vec<u8> = head.to_ascii_lowercase();
    if blank_before_colon(&lower) {
        return None;
    }
    let lengths = headers(&lower, b"\r\ncontent-length:");
    let mut clen = content_length(&lengths)?;
    let codings = headers(&lower, b"\r\ntransfer-encoding:");
    let http10 = lower[7] == b'0';
    // HTTP/1.0 closes unless it says keep-alive; Connection is a list of tokens
    // (RFC 9110 7.6.1): "closed" is not "close"
    let mut close = http10;
    let connection = headers(&lower, b"\r\nconnection:");
    let has = |token: &[u8]| {
        connection
            .iter()
            .flat_map(|v| v.split(|&c| c == b','))
            .any(|o| trim(o) == token)
    };
    if has(b"close") {
        close = true;
    } else if has(b"keep-alive") {
        close = false;
    }
    let mut chunked = false;
    if !codings.is_empty() {
        // the length is the codings' (RFC 9112 6.3 item 3); with a Content-Length too
        // (or from HTTP/1.0, 6.1) the answer may be a smuggling attempt: not reused
        let names: Vec<&[u8]> = codings
            .iter()
            .flat_map(|v| v.split(|&c| c == b','))
            .map(|c| trim(c.split(|&b| b == b';').next().unwrap_or(c)))
            .filter(|n| !n.is_empty())
            .collect();
        if names.iter().filter(|n| **n == b"chunked").count() > 1 {
            return None; // chunked applied more than once (RFC 9112 6.1)
        }
        chunked = names.last() == Some(&&b"chunked"[..]);
        close = close || !lengths.is_empty() || http10;
        clen = -1;
    }
    Some((status, clen, chunked, close))
}

/// Whether a field line has whitespace between its name and the colon (RFC 9112 5.1:
/// an invalid message; `Content-Length : 5` is no framing header).
fn blank_before_colon(lower: &[u8]) -> bool {
    let mut rest = lower;
    // each line after the status line
    while let Some(i) = find(rest, b"\r\n") {
        rest = &rest[i + 2..];
        let line = &rest[..find(rest, b"\r\n").unwrap_or(rest.len())];
        if let Some(c) = line.iter().position(|&b| b == b':') {
            if c > 0 && (line[c - 1] == b' ' || line[c - 1] == b'\t') {
                return true;
            }
        }
    }
    false
}

/// The values of every header named by `key` (lowercase, with its CRLF).
fn headers<'a>(lower: &'a [u8], key: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = find(&lower[from..], key) {
        let start = from + i + key.len();
        let rest = &lower[start..];
        let end = find(rest, b"\r\n").unwrap_or(rest.len());
        out.push(&rest[..end]);
        from = start + end;
    }
    out
}

/// The length the Content-Length lines give, -1 without one; None when they are not
/// all the same number (RFC 9112 6.3 item 5: an unrecoverable framing error).
fn content_length(values: &[&[u8]]) -> Option<i64> {
    let mut clen = -1i64;
    for v in values.iter().flat_map(|v| v.split(|&c| c == b',')) {
        let n = parse_int(v, 10)?;
        if clen >= 0 && n != clen {
            return None;
        }
        clen = n;
    }
    Some(clen)
}

/// `s` without the blanks (space, tab) around it.
fn trim(s: &[u8]) -> &[u8] {
    let is_blank = |c: &u8| *c == b' ' || *c == b'\t';
    let a = s.iter().position(|c| !is_blank(c)).unwrap_or(s.len());
    let b = s.iter().rposition(|c| !is_blank(c)).map_or(a, |i| i + 1);
    &s[a..b]
}

/// Where `needle` starts in `buf`; without it, wait for more bytes (all of `buf` kept).
/// A line or head that ends past HEAD_LIMIT (with its `needle`) is bad, found or not:
/// the same whether it came in one read or in many.
fn find_or_wait(buf: &[u8], needle: &[u8]) -> Result<usize, Outcome> {
    match find(buf, needle) {
        Some(i) if i + needle.len() <= HEAD_LIMIT => Ok(i),
        Some(_) => Err(Outcome::Bad),
        None => Err(within_limit(buf)),
    }
}

/// Wait for more of a head, line or trailer that has no end yet in `buf`, unless it
/// already cannot end within HEAD_LIMIT.
fn within_limit(buf: &[u8]) -> Outcome {
    if buf.len() >= HEAD_LIMIT {
        Outcome::Bad
    } else {
        Outcome::More(buf.len())
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    if needle.len() == 4 && needle == b"\r\n\r\n" {
        // the hot search: every response head ends with it
        let mut i = 0;
        while i + 4 <= hay.len() {
            match hay[i + 3] {
                b'\n' => {
                    if &hay[i..i + 4] == b"\r\n\r\n" {
                        return Some(i);
                    }
                    i += 1;
                }
                b'\r' => i += 1,
                _ => i += 4,
            }
        }
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A length or code: digits only, blanks (space, tab) around allowed; no sign (which
/// from_str_radix would take). None when it does not fit an i64.
pub fn parse_int(text: &[u8], base: u32) -> Option<i64> {
    let s = std::str::from_utf8(text).ok()?.trim_matches([' ', '\t']);
    if s.is_empty() || !s.chars().all(|c| c.is_digit(base)) {
        return None;
    }
    i64::from_str_radix(s, base).ok()
}

/// The largest chunk a response may announce: its size and CRLF must fit in an i64.
pub const CHUNK_LIMIT: i64 = i64::MAX - 2;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum St {
    Head,
    Body,
    ChunkSize,
    ChunkData,
    /// The CRLF that ends a chunk's data.
    ChunkEnd,
    Trailer,
    UntilClose,
}

/// What a connection's parser knows of the response in progress.
#[derive(Debug)]
pub struct Parser {
    pub st: St,
    pub remaining: i64,
    pub status: i32,
    pub nbytes: i64,
    pub close_after: bool,
    pub head_only: bool,
}

pub enum Outcome {
    /// Wants more bytes; keep these (a partial head, chunk-size line or trailer).
    More(usize),
    Complete,
    Bad,
}

impl Parser {
    pub fn new() -> Self {
        Parser {
            st: St::Head,
            remaining: 0,
            status: 0,
            nbytes: 0,
            close_after: false,
            head_only: false,
        }
    }

    pub fn reset(&mut self, head_only: bool) {
        self.st = St::Head;
        self.remaining = 0;
        self.status = 0;
        self.nbytes = 0;
        self.close_after = false;
        self.head_only = head_only;
    }

    /// One read's bytes: fed after what `kept` holds from the reads before (a partial
    /// head, chunk-size line, chunk end or trailer), and `kept` left holding what the
    /// next read must follow. What the engine does with every read.
    pub fn feed_read(&mut self, kept: &mut Vec<u8>, data: &[u8]) -> Outcome {
        if kept.is_empty() {
            let o = self.feed(data);
            if let Outcome::More(k) = o {
                kept.extend_from_slice(&data[data.len() - k..]);
            }
            return o;
        }
        kept.extend_from_slice(data);
        let buf = std::mem::take(kept);
        let o = self.feed(&buf);
        if let Outcome::More(k) = o {
            kept.extend_from_slice(&buf[buf.len() - k..]);
        }
        o
    }

    /// Feed `buf` (what was kept plus what just arrived). `More(k)`: keep the last k bytes.
    pub fn feed(&mut self, mut buf: &[u8]) -> Outcome {
        loop {
            match self.st {
                St::Head => {
                    let i = match find_or_wait(buf, b"\r\n\r\n") {
                        Ok(i) => i,
                        Err(o) => return o,
                    };
                    let (status, clen, chunked, close) = match parse_head(&buf[..i]) {
                        Some(h) => h,
                        None => return Outcome::Bad,
                    };
                    buf = &buf[i + 4..];
                    if status == 101 {
                        return Outcome::Bad; // a switch to a protocol no request asked for
                    }
                    if (100..200).contains(&status) {
                        continue; // interim response: the real one follows
                    }
                    self.status = status;
                    self.close_after = close;
                    if self.head_only || status == 204 || status == 304 {
                        self.close_after |= !buf.is_empty(); // a body where none may be
                        return Outcome::Complete;
                    }
                    if chunked {
                        self.st = St::ChunkSize;
                    } else if clen >= 0 {
                        self.st = St::Body;
                        self.remaining = clen;
                    } else {
                        self.st = St::UntilClose;
                        self.close_after = true;
                    }
                }
                St::Body => {
                    let n = buf.len() as i64;
                    if n >= self.remaining {
                        self.nbytes += self.remaining;
                        self.close_after |= n > self.remaining; // more than its length
                        return Outcome::Complete;
                    }
                    self.remaining -= n;
                    self.nbytes += n;
                    return Outcome::More(0);
                }
                St::ChunkSize => {
                    let j = match find_or_wait(buf, b"\r\n") {
                        Ok(j) => j,
                        Err(o) => return o,
                    };
                    let line = &buf[..j];
                    let digits = match line.iter().position(|&c| c == b';') {
                        Some(k) => &line[..k],
                        None => line,
                    };
                    let size = match parse_int(digits, 16) {
                        Some(s) if (0..=CHUNK_LIMIT).contains(&s) => s,
                        _ => return Outcome::Bad,
                    };
                    buf = &buf[j + 2..];
                    if size == 0 {
                        self.st = St::Trailer;
                    } else {
                        self.nbytes += size;
                        self.remaining = size;
                        self.st = St::ChunkData;
                    }
                }
                St::ChunkData => {
                    let n = buf.len() as i64;
                    if n < self.remaining {
                        self.remaining -= n;
                        return Outcome::More(0);
                    }
                    buf = &buf[self.remaining as usize..];
                    self.st = St::ChunkEnd;
                }
                St::ChunkEnd => {
                    if buf.len() < 2 {
                        if buf.is_empty() || buf == b"\r" {
                            return Outcome::More(buf.len());
                        }
                        return Outcome::Bad;
                    }
                    if &buf[..2] != b"\r\n" {
                        return Outcome::Bad;
                    }
                    buf = &buf[2..];
                    self.st = St::ChunkSize;
                }
                St::Trailer => {
                    let end = if buf.starts_with(b"\r\n") {
                        Some(2)
                    } else {
                        find(buf, b"\r\n\r\n").map(|i| i + 4)
                    };
                    return match end {
                        Some(end) if end > HEAD_LIMIT => Outcome::Bad,
                        Some(end) => {
                            self.close_after |= buf.len() > end; // bytes past the trailer
                            Outcome::Complete
                        }
                        None => within_limit(buf),
                    };
                }
                St::UntilClose => {
                    self.nbytes += buf.len() as i64;
                    return Outcome::More(0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

    /// What a parser says of `reads`, each fed as one read with what it kept before.
    fn answer(reads: &[&[u8]]) -> (&'static str, i32, i64) {
        let mut p = Parser::new();
        let mut kept: Vec<u8> = Vec::new();
        for r in reads {
            kept.extend_from_slice(r);
            match p.feed(&kept) {
                Outcome::More(k) => kept = kept[kept.len() - k..].to_vec(),
                Outcome::Complete => return ("complete", p.status, p.nbytes),
                Outcome::Bad => return ("bad", p.status, p.nbytes),
            }
        }
        ("more", p.status, p.nbytes)
    }

    fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
        [a, b].concat()
    }

    #[test]
    fn a_malformed_chunk_is_bad() {
        for body in [
            &b"-2\r\n0\r\n\r\n"[..],
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"0_5\r\nhello\r\n0\r\n\r\n",
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloXY0\r\n\r\n",
            b"10000000000000000\r\nxx",
            // i64::MAX: its size plus CRLF overflowed, and slicing past it panicked
            b"7fffffffffffffff\r\nxx",
        ] {
            assert_eq!(answer(&[&cat(CHUNKED, body)]).0, "bad", "{body:?}");
        }
    }

    #[test]
    fn a_chunk_ends_with_crlf_even_split_over_reads() {
        let first = cat(CHUNKED, b"5\r\nhello\r");
        assert_eq!(answer(&[&first, b"\n0;x=1\r\n\r\n"]), ("complete", 200, 5));
    }

    #[test]
    fn a_status_or_length_that_is_not_a_number_of_http_is_refused() {
        for head in [
            &b"HTTP/1.1 -12 OK"[..],
            b"HTTP/1.1 000 OK",
            b"HTTP/1.1 999 OK",
            b"HTTP/1.1 2\r\nX: y",
            b"HTTP/1.1 2000 OK",
            b"HTTP/1.1 200 OK\r\nContent-Length: +2",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0_2",
            b"HTTP/1.1 200 OK\r\nContent-Length: -5",
        ] {
            assert_eq!(parse_head(head), None, "{head:?}");
        }
    }

    /// Whether a parser fed `data` completes an answer and then closes its connection.
    fn closes_after(data: &[u8]) -> bool {
        let mut p = Parser::new();
        assert!(matches!(p.feed(data), Outcome::Complete), "{data:?}");
        p.close_after
    }

    #[test]
    fn bytes_past_an_answer_close_its_connection() {
        for data in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nok"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 503 X\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\nhello",
            &cat(CHUNKED, b"0\r\n\r\nHTTP/1.1 200 OK\r\n"),
        ] {
            assert!(closes_after(data), "{data:?}");
        }
        assert!(!closes_after(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        ));
        assert!(!closes_after(&cat(CHUNKED, b"0\r\nX: y\r\n\r\n")));
    }

    #[test]
    fn a_long_head_line_or_trailer_is_bad_however_it_is_read() {
        // each ends past HEAD_LIMIT; whole in one read it once completed, and was
        // bad only when it came in reads (a partial one past the limit)
        let pad = |n: usize| [b"X: ".as_slice(), &vec![b'y'; n]].concat();
        let head = cat(b"HTTP/1.1 200 OK\r\n", &pad(HEAD_LIMIT));
        let head = cat(&head, b"\r\nContent-Length: 0\r\n\r\n");
        let line = cat(
            CHUNKED,
            &cat(b"1;", &cat(&pad(HEAD_LIMIT), b"\r\nx\r\n0\r\n\r\n")),
        );
        let trailer = cat(CHUNKED, &cat(b"0\r\n", &cat(&pad(HEAD_LIMIT), b"\r\n\r\n")));
        for data in [&head, &line, &trailer] {
            let split: Vec<&[u8]> = data.chunks(1000).collect();
            assert_eq!(answer(&[data]).0, "bad");
            assert_eq!(answer(&split).0, "bad");
        }
        // one that just fits (its CRLFCRLF the limit's last bytes), whole or in reads
        let fits = cat(b"HTTP/1.1 200 OK\r\n", &pad(HEAD_LIMIT - 43));
        let fits = cat(&fits, b"\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(fits.len(), HEAD_LIMIT);
        let split: Vec<&[u8]> = fits.chunks(1000).collect();
        assert_eq!(answer(&[&fits]).0, "complete");
        assert_eq!(answer(&split).0, "complete");
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = |fields: &str| parse_head(format!("HTTP/1.1 200 OK\r\n{fields}").as_bytes());
        // differing Content-Length values, on two lines or in a list: a framing error
        assert_eq!(h("Content-Length: 5\r\nContent-Length: 7"), None);
        assert_eq!(h("Content-Length: 5, 7"), None);
        assert_eq!(h("Content-Length: 7,"), None);
        assert_eq!(h("Content-Length: 5 7"), None);
        // the same value repeated is one
        assert_eq!(
            h("Content-Length: 24, 24\r\nContent-Length: 24"),
            Some((200, 24, false, false))
        );
        // chunked only as the final coding; Transfer-Encoding wins and closes
        assert_eq!(
            h("Transfer-Encoding: chunked, gzip"),
            Some((200, -1, false, false))
        );
        assert_eq!(
            h("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked"),
            Some((200, -1, true, false))
        );
        assert_eq!(
            h("Content-Length: 9\r\nTransfer-Encoding: gzip, chunked"),
            Some((200, -1, true, true))
        );
        assert_eq!(
            h("Connection: keep-alive\r\nConnection: close"),
            Some((200, -1, false, true))
        );
        // Connection is a list of tokens: "closed" is not "close"
        assert_eq!(h("Connection: closed"), Some((200, -1, false, false)));
        assert_eq!(
            h("Connection: Upgrade, Close"),
            Some((200, -1, false, true))
        );
        // whitespace before a field's colon, or chunked twice: invalid, not a framing header
        assert_eq!(h("Content-Length : 5"), None);
        assert_eq!(h("X-Any\t: y\r\nContent-Length: 5"), None);
        assert_eq!(h("Transfer-Encoding: chunked, chunked"), None);
        assert_eq!(
            h("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip, Chunked"),
            None
        );
        // a 101 no request asked for is bad; other interim answers are skipped
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(answer(&[b"HTTP/1.1 101 Switching\r\n\r\n", ok]).0, "bad");
        assert_eq!(
            answer(&[b"HTTP/1.1 103 Early Hints\r\n\r\n", ok]),
            ("complete", 200, 2)
        );
    }

    #[test]
    fn well_formed_answers_still_parse() {
        assert_eq!(
            parse_head(b"HTTP/1.1 200\r\nContent-Length:  2 "),
            Some((200, 2, false, false))
        );
        assert_eq!(parse_head(b"HTTP/1.0 599 X"), Some((599, -1, false, true)));
        assert_eq!(
            answer(&[&cat(CHUNKED, b"2\r\nok\r\n"), b"0\r\n\r\n"]),
            ("complete", 200, 2)
        );
    }
}
