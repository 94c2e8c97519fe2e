//! A TLS-inspecting HTTP proxy for tests, like those of corporate networks: a client asks it
//! for a tunnel (`CONNECT host:443`), and instead of connecting to `host` it answers the TLS
//! handshake itself with a certificate of its own, then forwards the decrypted bytes to a local
//! plain-HTTP server (the Firestore emulator, say). A client that trusts the proxy's CA talks to
//! the local server as if it were `host`; one that does not fails its handshake.
//!
//! One thread per direction and connection; nothing here panics the test process. Dropping the
//! proxy closes every connection.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};

/// The longest CONNECT request head accepted.
const MAX_HEAD_BYTES: usize = 16 * 1024;

struct Shared {
    config: Arc<ServerConfig>,
    upstream: SocketAddr,
    stopping: AtomicBool,
    /// Each client socket (to shut it down on drop).
    sockets: Mutex<Vec<TcpStream>>,
    /// Hosts clients asked for, in order.
    connects: Mutex<Vec<String>>,
}

/// A running proxy on `127.0.0.1` and a free port.
pub struct TlsInterceptor {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl TlsInterceptor {
    /// Starts a proxy that presents `cert` (PEM, with its private key `key`) to every client
    /// and forwards what they send to `upstream`. The server side picks *ring* explicitly, so
    /// the test process' rustls default is not touched.
    pub fn start(cert: &Path, key: &Path, upstream: SocketAddr) -> TlsInterceptor {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .expect("read the proxy's certificate")
            .collect::<Result<_, _>>()
            .expect("parse the proxy's certificate");
        let key = PrivateKeyDer::from_pem_file(key).expect("read the proxy's key");
        let config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .expect("the proxy's certificate and key");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port for the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            config: Arc::new(config),
            upstream,
            stopping: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
            connects: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name(format!("tls-proxy-{}", addr.port()))
            .spawn(move || accept(&listener, &accepting))
            .expect("start the proxy's accepting thread");
        TlsInterceptor {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:PORT`: what `HTTPS_PROXY` holds for a client to use this proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The `host:port` of every tunnel asked for so far.
    pub fn connects(&self) -> Vec<String> {
        self.shared
            .connects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TlsInterceptor {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            // accept() returns for a connection, and then sees `stopping`.
            if TcpStream::connect(self.addr).is_ok() {
                let _ = acceptor.join();
            }
        }
        let sockets = std::mem::take(
            &mut *self
                .shared
                .sockets
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for socket in sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if let Ok(control) = stream.try_clone() {
            shared
                .sockets
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(control);
        }
        let serving = Arc::clone(shared);
        let _ = std::thread::Builder::new()
            .name("tls-proxy-connection".to_owned())
            .spawn(move || {
                let _ = serve(stream, &serving);
            });
    }
}

/// One client: the CONNECT exchange, then TLS on the same socket, relayed to the upstream.
fn serve(mut client: TcpStream, shared: &Shared) -> io::Result<()> {
    let head = read_head(&mut client)?;
    let Some(target) = head
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split(' ').next())
    else {
        client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")?;
        return Ok(());
    };
    shared
        .connects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(target.to_owned());
    let upstream = match TcpStream::connect(shared.upstream) {
        Ok(upstream) => upstream,
        Err(_) => {
            client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")?;
            return Ok(());
        }
    };
    client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    let tls = ServerConnection::new(Arc::clone(&shared.config))
        .map_err(|e| io::Error::other(e.to_string()))?;
    relay(client, upstream, tls)
}

/// The request head, up to the blank line, read byte by byte so that nothing of the TLS
/// handshake behind it is consumed.
fn read_head(client: &mut TcpStream) -> io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_HEAD_BYTES || client.read(&mut byte)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// Relays between the TLS client and the plain upstream until either side closes. The TLS
/// state is shared by both directions; each holds its lock only to process bytes already
/// received and to write what TLS produced, never while waiting for a socket.
fn relay(client: TcpStream, upstream: TcpStream, tls: ServerConnection) -> io::Result<()> {
    let tls = Arc::new(Mutex::new(tls));
    let (tls_out, client_out, upstream_in) =
        (Arc::clone(&tls), client.try_clone()?, upstream.try_clone()?);
    // Upstream → client: plaintext in, TLS records out.
    let back = std::thread::Builder::new()
        .name("tls-proxy-back".to_owned())
        .spawn(move || {
            let (mut upstream, mut client) = (upstream_in, client_out);
            let mut buffer = [0u8; 16 * 1024];
            loop {
                let read = upstream.read(&mut buffer).unwrap_or(0);
                let mut tls = tls_out.lock().unwrap_or_else(PoisonError::into_inner);
                if read == 0 {
                    tls.send_close_notify();
                } else if tls.writer().write_all(&buffer[..read]).is_err() {
                    break;
                }
                if flush(&mut tls, &mut client).is_err() || read == 0 {
                    break;
                }
            }
            let _ = client.shutdown(Shutdown::Both);
        })?;
    // Client → upstream: TLS records in, plaintext out (and handshake answers back).
    let (mut client, mut upstream) = (client, upstream);
    let mut buffer = [0u8; 16 * 1024];
    let result = (|| -> io::Result<()> {
        loop {
            let read = client.read(&mut buffer)?;
            if read == 0 {
                return Ok(());
            }
            let mut received = &buffer[..read];
            let mut plaintext = Vec::new();
            {
                let mut tls = tls.lock().unwrap_or_else(PoisonError::into_inner);
                while !received.is_empty() {
                    tls.read_tls(&mut received)?;
                    let processed = tls.process_new_packets();
                    // Handshake messages, or the alert that tells the client why not.
                    flush(&mut tls, &mut client)?;
                    let state = processed.map_err(|e| io::Error::other(e.to_string()))?;
                    if state.plaintext_bytes_to_read() > 0 {
                        let mut chunk = vec![0u8; state.plaintext_bytes_to_read()];
                        tls.reader().read_exact(&mut chunk)?;
                        plaintext.extend_from_slice(&chunk);
                    }
                    if state.peer_has_closed() {
                        break;
                    }
                }
            }
            upstream.write_all(&plaintext)?;
        }
    })();
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
    let _ = back.join();
    result
}

/// Writes whatever TLS records are pending to the client.
fn flush(tls: &mut ServerConnection, client: &mut TcpStream) -> io::Result<()> {
    while tls.wants_write() {
        tls.write_tls(client)?;
    }
    client.flush()
}
