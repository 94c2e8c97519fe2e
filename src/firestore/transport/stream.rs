//! A connection to an HTTP server: TCP, through a proxy's `CONNECT` tunnel or not, with TLS
//! or not, whose every read and write ends at the request's deadline.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;

use super::error::Error;
use super::proxy::Proxy;
use super::wire;

/// The bytes of a connection.
enum Inner {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

/// An open connection and the deadline of the request it serves.
pub(crate) struct Stream {
    inner: Inner,
    deadline: Instant,
}

impl Stream {
    /// Connects to `host:port` (through `proxy` when given), in TLS when `tls` is given, by
    /// `deadline`.
    pub fn connect(
        host: &str,
        port: u16,
        proxy: Option<&Proxy>,
        tls: Option<&Arc<rustls::ClientConfig>>,
        deadline: Instant,
    ) -> Result<Stream, Error> {
        let tcp = match proxy {
            None => tcp_connect(host, port, deadline)?,
            Some(proxy) => tcp_connect(&proxy.host, proxy.port, deadline)?,
        };
        let mut stream = Stream {
            inner: Inner::Plain(tcp),
            deadline,
        };
        if let (Some(proxy), Some(_)) = (proxy, tls) {
            // An https request goes through a tunnel; plain http ones are sent to the proxy.
            wire::open_tunnel(&mut stream, host, port, proxy.authorization.as_deref())?;
        }
        let Some(config) = tls else {
            return Ok(stream);
        };
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
            .map_err(|_| Error::BadRequest(format!("{host} is not a valid TLS server name")))?
            .to_owned();
        let connection = rustls::ClientConnection::new(Arc::clone(config), name)
            .map_err(|e| Error::Io(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        let Inner::Plain(tcp) = stream.inner else {
            unreachable!("TLS wraps the plain connection just made")
        };
        Ok(Stream {
            inner: Inner::Tls(Box::new(rustls::StreamOwned::new(connection, tcp))),
            deadline,
        })
    }

    /// The deadline of the next request on this connection.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    fn tcp(&self) -> &TcpStream {
        match &self.inner {
            Inner::Plain(tcp) => tcp,
            Inner::Tls(tls) => tls.get_ref(),
        }
    }

    /// Sets the socket's timeouts to what is left before the deadline.
    fn arm(&self) -> io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        self.tcp().set_read_timeout(Some(left))?;
        self.tcp().set_write_timeout(Some(left))
    }

    /// Whether an idle connection can carry another request: the server has neither closed it
    /// nor sent anything unasked (a peek that would block).
    pub fn is_reusable(&self) -> bool {
        let tcp = self.tcp();
        if tcp.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let idle = matches!(tcp.peek(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        tcp.set_nonblocking(false).is_ok() && idle
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        match &mut self.inner {
            Inner::Plain(tcp) => tcp.read(buf),
            Inner::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        match &mut self.inner {
            Inner::Plain(tcp) => tcp.write(buf),
            Inner::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.arm()?;
        match &mut self.inner {
            Inner::Plain(tcp) => tcp.flush(),
            Inner::Tls(tls) => tls.flush(),
        }
    }
}

/// A TCP connection to the first address of `host:port` that accepts one by `deadline`.
fn tcp_connect(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, Error> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<_> = (bare, port)
        .to_socket_addrs()
        .map_err(|e| {
            let text = e.to_string();
            let why = text
                .split_once("failed to lookup address information: ")
                .map_or(text.as_str(), |(_, why)| why)
                .to_owned();
            Error::HostNotFound(why)
        })?
        .collect();
    if addrs.is_empty() {
        return Err(Error::HostNotFound("no address".to_owned()));
    }
    let mut last = None;
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout);
        }
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
            Ok(tcp) => {
                // Requests are written whole, and waiting to fill a segment only delays them.
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Err(error) => last = Some(error),
        }
    }
    Err(last.map_or(Error::Timeout, Error::from_io))
}
