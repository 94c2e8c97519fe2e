//! A local HTTP/1.1 server for tests, on the standard library alone: a handler turns each
//! request into a response, and every request is recorded for the test to inspect.
//!
//! It speaks just enough HTTP/1.1 for an HTTP client: keep-alive (clients such as `ureq` send
//! several requests over one connection), `Content-Length` and chunked request bodies,
//! `Expect: 100-continue`, and responses with a `Content-Length`. One thread per connection.
//! A request it cannot parse gets a 400 and its connection is closed; a handler that panics
//! gets its client a 500 and the connection closed; [`StubResponse::hang_up`] closes it without
//! an answer. Nothing here panics the test process.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// The longest request line or header line accepted.
const MAX_LINE_BYTES: u64 = 16 * 1024;
/// The most header lines accepted in one request.
const MAX_HEADERS: usize = 100;
/// The largest request body accepted.
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// A request as the server received it.
#[derive(Clone, Debug)]
pub struct StubRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target: the path with its query, e.g. `/token?x=1`.
    pub path: String,
    /// Every header in the order received, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl StubRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON. Panics (failing the test) when it is not JSON.
    pub fn body_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the request body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as `application/x-www-form-urlencoded` pairs, decoded, in order.
    pub fn form(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(&self.body)
            .into_owned()
            .collect()
    }
}

/// What the handler answers. The server adds `Content-Length` (and `Connection: close` when it
/// closes the connection); those headers in `headers` are ignored.
#[derive(Clone, Debug)]
pub struct StubResponse {
    /// The status code.
    pub status: u16,
    /// Headers to send, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl StubResponse {
    /// No answer at all: the server closes the connection instead of answering (the request
    /// was received and handled, the answer is lost on the way back).
    pub fn hang_up() -> Self {
        StubResponse {
            status: 0,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Whether this is [`hang_up`](StubResponse::hang_up).
    fn is_hang_up(&self) -> bool {
        self.status == 0
    }

    /// A response with `body` as JSON.
    pub fn json(status: u16, body: serde_json::Value) -> Self {
        StubResponse {
            status,
            headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
            body: body.to_string().into_bytes(),
        }
    }
}

type Handler = dyn Fn(&StubRequest) -> StubResponse + Send + Sync;

/// What the accepting thread, the connection threads and the `StubServer` share.
struct Shared {
    handler: Box<Handler>,
    requests: Mutex<Vec<StubRequest>>,
    stopping: AtomicBool,
    /// Each connection's socket (to shut it down on drop) and thread.
    connections: Mutex<Vec<(TcpStream, JoinHandle<()>)>>,
}

/// A running server on `127.0.0.1` and a free port. Dropping it closes every connection and
/// waits for its threads to end, which includes waiting for handlers still running to return.
pub struct StubServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl StubServer {
    /// Starts a server that answers every request with `handler`.
    pub fn start(
        handler: impl Fn(&StubRequest) -> StubResponse + Send + Sync + 'static,
    ) -> StubServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port for the stub");
        let addr = listener.local_addr().expect("the stub's local address");
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            requests: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name(format!("stub-http-{}", addr.port()))
            .spawn(move || accept(&listener, &accepting))
            .expect("start the stub's accepting thread");
        StubServer {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `127.0.0.1:PORT`
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Every request received so far, in the order they arrived (each is recorded before its
    /// handler runs).
    pub fn requests(&self) -> Vec<StubRequest> {
        lock(&self.shared.requests).clone()
    }
}

impl Drop for StubServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            // The accepting thread is blocked in accept(): a connection wakes it, and it sees
            // `stopping`. Without that connection it would never return, so it is not waited for.
            if TcpStream::connect(self.addr).is_ok() {
                let _ = acceptor.join();
            }
        }
        let connections = std::mem::take(&mut *lock(&self.shared.connections));
        for (socket, _) in &connections {
            let _ = socket.shutdown(Shutdown::Both);
        }
        for (_, thread) in connections {
            let _ = thread.join();
        }
    }
}

/// Locks `mutex`, also after a panic elsewhere: what it guards stays consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Accepts connections until the server stops, one thread each.
fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let Ok(control) = stream.try_clone() else {
            continue;
        };
        let serving = Arc::clone(shared);
        let thread = std::thread::Builder::new()
            .name("stub-http-connection".to_owned())
            .spawn(move || serve(stream, &serving));
        match thread {
            Ok(thread) => lock(&shared.connections).push((control, thread)),
            Err(_) => {
                let _ = control.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Why a request could not be read.
enum ReadError {
    /// The client closed the connection between requests: the normal end.
    Closed,
    /// Not HTTP/1.x as this server understands it.
    Malformed(String),
    /// The socket failed.
    Io,
}

impl From<io::Error> for ReadError {
    fn from(_: io::Error) -> Self {
        ReadError::Io
    }
}

/// Serves one connection: requests one after another until the client closes it, asks to
/// close it, or sends something malformed.
fn serve(stream: TcpStream, shared: &Shared) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = stream;
    while !shared.stopping.load(Ordering::SeqCst) {
        let (request, keep_alive) = match read_request(&mut reader, &mut writer) {
            Ok(read) => read,
            Err(ReadError::Malformed(why)) => {
                let response = StubResponse {
                    status: 400,
                    headers: vec![("Content-Type".to_owned(), "text/plain".to_owned())],
                    body: format!("malformed request: {why}").into_bytes(),
                };
                let _ = write_response(&mut writer, &response, false, false);
                break;
            }
            Err(ReadError::Closed | ReadError::Io) => break,
        };
        lock(&shared.requests).push(request.clone());
        let answered = catch_unwind(AssertUnwindSafe(|| (shared.handler)(&request)));
        let (response, keep_alive) = match answered {
            Ok(response) => (response, keep_alive),
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let response = StubResponse {
                    status: 500,
                    headers: vec![("Content-Type".to_owned(), "text/plain".to_owned())],
                    body: format!("stub handler panicked: {why}").into_bytes(),
                };
                (response, false)
            }
        };
        if response.is_hang_up() {
            break;
        }
        let head_only = request.method == "HEAD";
        if write_response(&mut writer, &response, head_only, keep_alive).is_err() || !keep_alive {
            break;
        }
    }
    let _ = writer.shutdown(Shutdown::Both);
}

/// Reads one request, and whether the connection stays open after it.
fn read_request(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
) -> Result<(StubRequest, bool), ReadError> {
    // A few empty lines before a request are tolerated, as RFC 9112 suggests.
    let mut line = String::new();
    for _ in 0..4 {
        line = read_line(reader)?.ok_or(ReadError::Closed)?;
        if !line.is_empty() {
            break;
        }
    }
    let mut parts = line.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::Malformed(format!("bad request line {line:?}")));
    };
    let http_11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => {
            return Err(ReadError::Malformed(format!(
                "unsupported version {version:?}"
            )));
        }
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) || path.is_empty() {
        return Err(ReadError::Malformed(format!("bad request line {line:?}")));
    }

    let mut headers = Vec::new();
    loop {
        let line = read_line(reader)?
            .ok_or_else(|| ReadError::Malformed("connection closed in the headers".to_owned()))?;
        if line.is_empty() {
            break;
        }
        if headers.len() == MAX_HEADERS {
            return Err(ReadError::Malformed("too many headers".to_owned()));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(ReadError::Malformed(format!("bad header line {line:?}")));
        };
        if name.is_empty()
            || name
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(ReadError::Malformed(format!("bad header name {name:?}")));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };

    let chunked = match values("transfer-encoding").next_back() {
        None => false,
        Some(coding) if coding.eq_ignore_ascii_case("chunked") => true,
        Some(coding) => {
            return Err(ReadError::Malformed(format!(
                "unsupported transfer-encoding {coding:?}"
            )));
        }
    };
    let mut lengths = values("content-length");
    let length = match lengths.next() {
        None => None,
        Some(first) => {
            let parsed = first
                .parse::<u64>()
                .map_err(|_| ReadError::Malformed(format!("bad content-length {first:?}")))?;
            if lengths.any(|other| other != first) {
                return Err(ReadError::Malformed(
                    "conflicting content-lengths".to_owned(),
                ));
            }
            Some(parsed)
        }
    };
    if chunked && length.is_some() {
        return Err(ReadError::Malformed(
            "both transfer-encoding and content-length".to_owned(),
        ));
    }
    if length.is_some_and(|length| length > MAX_BODY_BYTES) {
        return Err(ReadError::Malformed("body too large".to_owned()));
    }

    let expects_body = chunked || length.is_some_and(|length| length > 0);
    let expect = values("expect").next().unwrap_or("");
    if expects_body && expect.eq_ignore_ascii_case("100-continue") {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        writer.flush()?;
    }
    let body = if chunked {
        read_chunked(reader)?
    } else {
        let mut body = Vec::new();
        let length = length.unwrap_or(0);
        let read = reader.take(length).read_to_end(&mut body)?;
        if read as u64 != length {
            return Err(ReadError::Malformed(
                "connection closed in the body".to_owned(),
            ));
        }
        body
    };

    let connection = values("connection").collect::<Vec<_>>().join(",");
    let has = |token: &str| {
        connection
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    let keep_alive = if http_11 {
        !has("close")
    } else {
        has("keep-alive")
    };
    let request = StubRequest {
        method: method.to_owned(),
        path: path.to_owned(),
        headers,
        body,
    };
    Ok((request, keep_alive))
}

/// A chunked body, de-chunked; trailers are read and dropped.
fn read_chunked(reader: &mut BufReader<TcpStream>) -> Result<Vec<u8>, ReadError> {
    let closed = || ReadError::Malformed("connection closed in a chunked body".to_owned());
    let mut body = Vec::new();
    loop {
        let line = read_line(reader)?.ok_or_else(closed)?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size, 16)
            .map_err(|_| ReadError::Malformed(format!("bad chunk size {size:?}")))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_line(reader)?.ok_or_else(closed)?.is_empty() {}
            return Ok(body);
        }
        if body.len() as u64 + size > MAX_BODY_BYTES {
            return Err(ReadError::Malformed("body too large".to_owned()));
        }
        let read = reader.take(size).read_to_end(&mut body)?;
        if read as u64 != size {
            return Err(closed());
        }
        if !read_line(reader)?.ok_or_else(closed)?.is_empty() {
            return Err(ReadError::Malformed(
                "chunk longer than its size".to_owned(),
            ));
        }
    }
}

/// One line without its line end; `None` at the end of the stream.
fn read_line(reader: &mut BufReader<TcpStream>) -> Result<Option<String>, ReadError> {
    let mut line = Vec::new();
    reader
        .take(MAX_LINE_BYTES + 1)
        .read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Ok(None);
    }
    if line.pop() != Some(b'\n') {
        return Err(ReadError::Malformed(
            if line.len() as u64 >= MAX_LINE_BYTES {
                "line too long"
            } else {
                "connection closed mid-line"
            }
            .to_owned(),
        ));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|_| ReadError::Malformed("a line is not UTF-8".to_owned()))
}

/// Writes `response` with a `Content-Length`; with `Connection: close` unless `keep_alive`.
fn write_response(
    writer: &mut TcpStream,
    response: &StubResponse,
    head_only: bool,
    keep_alive: bool,
) -> io::Result<()> {
    let status = response.status;
    // These statuses never have a body; a client would read the body as the next response.
    let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in &response.headers {
        let ours = ["content-length", "transfer-encoding", "connection"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n));
        if !ours {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    if !bodiless {
        head.push_str(&format!("Content-Length: {}\r\n", response.body.len()));
    }
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !bodiless && !head_only {
        out.extend_from_slice(&response.body);
    }
    writer.write_all(&out)?;
    writer.flush()
}

/// The reason phrase for the usual statuses; clients ignore it.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
