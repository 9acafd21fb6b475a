//! The least response parsing a load generator needs (a port of shrink/replay/_http.py
//! and the parser states of _conn.py): status, length (Content-Length, chunked, or up
//! to the close) and whether the connection stays open; the body is counted, never kept.

pub const HEAD_LIMIT: usize = 65536;

/// (status, content length or -1, chunked, close) of a head without its CRLFCRLF.
pub fn parse_head(head: &[u8]) -> Option<(i32, i64, bool, bool)> {
    if !head.starts_with(b"HTTP/1.") || head.len() < 12 {
        return None;
    }
    let status = parse_int(&head[9..12], 10)? as i32;
    let lower: Vec<u8> = head.to_ascii_lowercase();
    let mut clen = -1i64;
    if let Some(v) = header(&lower, b"\r\ncontent-length:") {
        clen = parse_int(v, 10)?;
    }
    let chunked = header(&lower, b"\r\ntransfer-encoding:")
        .map(|v| find(v, b"chunked").is_some())
        .unwrap_or(false);
    let mut close = lower[7] == b'0'; // HTTP/1.0 closes unless it says keep-alive
    if let Some(v) = header(&lower, b"\r\nconnection:") {
        if find(v, b"close").is_some() {
            close = true;
        } else if find(v, b"keep-alive").is_some() {
            close = false;
        }
    }
    Some((status, clen, chunked, close))
}

/// The value of the first header named by `key` (lowercase, with its CRLF), up to its CRLF.
fn header<'a>(lower: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let i = find(lower, key)?;
    let start = i + key.len();
    let rest = &lower[start..];
    let end = find(rest, b"\r\n").unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Where `needle` starts in `buf`; without it, wait for more bytes (all of `buf` kept),
/// unless `buf` is already longer than a head may be.
fn find_or_wait(buf: &[u8], needle: &[u8]) -> Result<usize, Outcome> {
    find(buf, needle).ok_or_else(|| {
        if buf.len() > HEAD_LIMIT {
            Outcome::Bad
        } else {
            Outcome::More(buf.len())
        }
    })
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

/// An integer as Python's int(text, base) reads it: surrounding blanks allowed.
pub fn parse_int(text: &[u8], base: u32) -> Option<i64> {
    let s = std::str::from_utf8(text).ok()?.trim();
    if s.is_empty() {
        return None;
    }
    i64::from_str_radix(s, base).ok()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum St {
    Head,
    Body,
    ChunkSize,
    ChunkData,
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
                    if (100..200).contains(&status) {
                        continue; // interim response: the real one follows
                    }
                    self.status = status;
                    self.close_after = close;
                    if self.head_only || status == 204 || status == 304 {
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
                        Some(s) if s >= 0 => s,
                        _ => return Outcome::Bad,
                    };
                    buf = &buf[j + 2..];
                    if size == 0 {
                        self.st = St::Trailer;
                    } else {
                        self.nbytes += size;
                        self.remaining = size + 2;
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
                    self.st = St::ChunkSize;
                }
                St::Trailer => {
                    if buf.starts_with(b"\r\n") || find(buf, b"\r\n\r\n").is_some() {
                        return Outcome::Complete;
                    }
                    if buf.len() > HEAD_LIMIT {
                        return Outcome::Bad;
                    }
                    return Outcome::More(buf.len());
                }
                St::UntilClose => {
                    self.nbytes += buf.len() as i64;
                    return Outcome::More(0);
                }
            }
        }
    }
}
