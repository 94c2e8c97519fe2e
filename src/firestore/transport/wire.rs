//! HTTP/1.1 as the client speaks it: a request written whole, an answer's head and body read
//! (`Content-Length`, chunked, or up to the end of the connection), and a proxy's `CONNECT`.
//! Nothing here logs: requests and answers carry tokens and secrets.

use std::io::{self, BufRead, Read, Write};

use super::error::Error;

/// The longest answer head (status line and headers) read.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// An answer's head: what the client needs of it.
pub(crate) struct Head {
    pub status: u16,
    /// The body's framing.
    pub framing: Framing,
    /// Whether the server keeps the connection open after this answer.
    pub keep_alive: bool,
}

/// How the body's end is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Length(u64),
    Chunked,
    /// Up to the end of the connection.
    Close,
}

/// Writes a request: the request line, `headers` (already checked), `Content-Length` and the
/// body, in one write.
pub(crate) fn write_request(
    stream: &mut impl Write,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: Option<&[u8]>,
) -> Result<(), Error> {
    let mut out = Vec::with_capacity(256 + body.map_or(0, <[u8]>::len));
    out.extend_from_slice(format!("{method} {target} HTTP/1.1\r\n").as_bytes());
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(body) = body {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        out.extend_from_slice(body);
    }
    stream.write_all(&out).map_err(Error::from_io)?;
    stream.flush().map_err(Error::from_io)
}

/// Whether a header name or value can go on the wire as it is (no line breaks, no control
/// characters but tab in values; a token for names).
pub(crate) fn is_valid_header(name: &str, value: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && value
            .bytes()
            .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// Reads one line of an answer head, without its line end.
fn read_line(reader: &mut impl BufRead, budget: &mut usize) -> Result<String, Error> {
    let mut line = Vec::new();
    let read = reader
        .take(*budget as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(Error::from_io)?;
    if read == 0 {
        return Err(Error::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection without answering",
        )));
    }
    if read > *budget {
        return Err(Error::Protocol("the answer's head is too long"));
    }
    *budget -= read;
    if line.last() != Some(&b'\n') {
        return Err(Error::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection closed in the middle of the answer's head",
        )));
    }
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| Error::Protocol("the answer's head is not text"))
}

/// Reads an answer's head (skipping `100 Continue` and other interim answers). `head_only`:
/// the request was a `HEAD`, so no body follows whatever the headers say.
pub(crate) fn read_head(reader: &mut impl BufRead, head_only: bool) -> Result<Head, Error> {
    loop {
        let mut budget = MAX_HEAD_BYTES;
        let status_line = read_line(reader, &mut budget)?;
        let mut parts = status_line.splitn(3, ' ');
        let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if !version.starts_with("HTTP/1.") {
            return Err(Error::Protocol("the status line is not HTTP/1.x"));
        }
        let status: u16 = code
            .parse()
            .ok()
            .filter(|code| (100..600).contains(code))
            .ok_or(Error::Protocol("the status code is not a number"))?;
        let mut keep_alive = version != "HTTP/1.0";
        let mut length = None;
        let mut chunked = false;
        loop {
            let line = read_line(reader, &mut budget)?;
            if line.is_empty() {
                break;
            }
            let (name, value) = line
                .split_once(':')
                .ok_or(Error::Protocol("a header line has no colon"))?;
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let parsed: u64 = value
                    .parse()
                    .map_err(|_| Error::Protocol("the Content-Length is not a number"))?;
                if length.is_some_and(|known| known != parsed) {
                    return Err(Error::Protocol("two different Content-Lengths"));
                }
                length = Some(parsed);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
                if !chunked {
                    return Err(Error::Protocol("a transfer coding other than chunked"));
                }
            } else if name.eq_ignore_ascii_case("connection") {
                for token in value.split(',').map(str::trim) {
                    if token.eq_ignore_ascii_case("close") {
                        keep_alive = false;
                    } else if token.eq_ignore_ascii_case("keep-alive") {
                        keep_alive = true;
                    }
                }
            }
        }
        if (100..200).contains(&status) {
            continue;
        }
        let framing = if head_only || status == 204 || status == 304 {
            Framing::Length(0)
        } else if chunked {
            Framing::Chunked
        } else if let Some(length) = length {
            Framing::Length(length)
        } else {
            keep_alive = false;
            Framing::Close
        };
        return Ok(Head {
            status,
            framing,
            keep_alive,
        });
    }
}

/// Reads a body of `framing`, at most `limit` bytes.
pub(crate) fn read_body(
    reader: &mut impl BufRead,
    framing: Framing,
    limit: u64,
) -> Result<Vec<u8>, Error> {
    let mut body = Vec::new();
    match framing {
        Framing::Length(length) => {
            if length > limit {
                return Err(Error::BodyExceedsLimit(limit));
            }
            read_exactly(reader, length, &mut body)?;
        }
        Framing::Close => {
            reader
                .take(limit + 1)
                .read_to_end(&mut body)
                .map_err(Error::from_io)?;
            if body.len() as u64 > limit {
                return Err(Error::BodyExceedsLimit(limit));
            }
        }
        Framing::Chunked => loop {
            let mut budget = MAX_HEAD_BYTES;
            let line = read_line(reader, &mut budget)?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size, 16)
                .map_err(|_| Error::Protocol("a chunk size is not hexadecimal"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !read_line(reader, &mut budget)?.is_empty() {}
                break;
            }
            if body.len() as u64 + size > limit {
                return Err(Error::BodyExceedsLimit(limit));
            }
            read_exactly(reader, size, &mut body)?;
            if !read_line(reader, &mut budget)?.is_empty() {
                return Err(Error::Protocol("a chunk is longer than its size"));
            }
        },
    }
    Ok(body)
}

/// Appends exactly `length` bytes of `reader` to `body`.
fn read_exactly(reader: &mut impl Read, length: u64, body: &mut Vec<u8>) -> Result<(), Error> {
    let read = reader
        .take(length)
        .read_to_end(body)
        .map_err(Error::from_io)?;
    if (read as u64) < length {
        return Err(Error::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection closed in the middle of the answer",
        )));
    }
    Ok(())
}

/// Asks the proxy on `stream` for a tunnel to `host:port`, and reads its answer (byte by byte:
/// what follows it belongs to the tunnel).
pub(crate) fn open_tunnel(
    stream: &mut (impl Read + Write),
    host: &str,
    port: u16,
    authorization: Option<&str>,
) -> Result<(), Error> {
    let authority = format!("{host}:{port}");
    let mut headers = vec![("Host".to_owned(), authority.clone())];
    if let Some(authorization) = authorization {
        headers.push(("Proxy-Authorization".to_owned(), authorization.to_owned()));
    }
    write_request(stream, "CONNECT", &authority, &headers, None)?;
    let mut reader = io::BufReader::with_capacity(1, stream);
    let head = read_head(&mut reader, true)?;
    if !(200..300).contains(&head.status) {
        return Err(Error::ProxyRefused(head.status));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Result<(u16, Vec<u8>, bool), Error> {
        let mut reader = io::BufReader::new(text.as_bytes());
        let head = read_head(&mut reader, false)?;
        let body = read_body(&mut reader, head.framing, 100)?;
        Ok((head.status, body, head.keep_alive))
    }

    #[test]
    fn answers_are_read_by_their_framing() {
        let (status, body, keep) =
            answer("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!((status, body.as_slice(), keep), (200, &b"hello"[..], true));
        let chunked = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 No\r\nTransfer-Encoding: \
                       chunked\r\nConnection: close\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: \
                       1\r\n\r\n";
        assert_eq!(answer(chunked).unwrap(), (503, b"abcde".to_vec(), false));
        let close = "HTTP/1.0 200 OK\r\n\r\nto the end";
        assert_eq!(answer(close).unwrap(), (200, b"to the end".to_vec(), false));
        let empty = "HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(answer(empty).unwrap(), (204, Vec::new(), true));
    }

    #[test]
    fn broken_answers_are_errors() {
        let eof = |text| matches!(answer(text), Err(Error::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof);
        assert!(eof(""));
        assert!(eof("HTTP/1.1 200 OK\r\nContent-Le"));
        assert!(eof("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"));
        assert!(matches!(answer("SSH-2.0\r\n\r\n"), Err(Error::Protocol(_))));
        assert!(matches!(
            answer("HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n"),
            Err(Error::BodyExceedsLimit(100))
        ));
        assert!(matches!(
            answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn requests_are_written_whole() {
        let mut out = Vec::new();
        let headers = [("Host".to_owned(), "h:1".to_owned())];
        write_request(&mut out, "POST", "/p?q", &headers, Some(b"{}")).unwrap();
        assert_eq!(
            out,
            b"POST /p?q HTTP/1.1\r\nHost: h:1\r\nContent-Length: 2\r\n\r\n{}".to_vec()
        );
        assert!(is_valid_header("Authorization", "Bearer a.b-c_d"));
        assert!(!is_valid_header("Authorization", "Bearer a\r\nX: y"));
        assert!(!is_valid_header("Bad Name", "v"));
    }
}
