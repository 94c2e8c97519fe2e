//! The codes and messages of a Redis Cluster or Sentinel deployment that cannot be used: a node
//! that never answers is a `NetworkTimeout` (one wait per node, no second round of waits to
//! explain it), credentials the servers refuse are `AuthFailed`, and no message shows the
//! password.

use std::io::Read as _;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use syncguard::ErrorCode;

use crate::support::{impatient_redis, shared_cluster, shared_sentinels, within_a_minute};

/// A password no server here knows, distinctive enough to find in a message.
const PASSWORD: &str = "Hunter2-secret";

/// A node behind a black hole: accepts connections, reads what it is sent, never answers.
struct SilentNode {
    port: u16,
    accepted: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<u8>>>,
}

impl SilentNode {
    /// Connections stay open until the test process ends.
    fn start() -> SilentNode {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a silent node");
        let port = listener.local_addr().expect("its address").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (count, log) = (Arc::clone(&accepted), Arc::clone(&received));
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let mut buffer = [0; 4096];
                    while let Ok(n @ 1..) = stream.read(&mut buffer) {
                        log.lock().unwrap().extend_from_slice(&buffer[..n]);
                    }
                });
            }
        });
        SilentNode {
            port,
            accepted,
            received,
        }
    }

    /// Everything clients sent, as text.
    fn received(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }

    /// One connection, and nothing sent on it that waits for a reply before the one that
    /// matters: redis-rs awaits each reply of a connection's setup with the whole timeout,
    /// also after one timed out, so every command there is one more wait.
    fn assert_one_wait(&self, err: &syncguard::LockError) {
        assert_eq!(
            self.accepted.load(Ordering::SeqCst),
            1,
            "one connection to the silent node: {err}"
        );
        let received = self.received();
        assert!(
            !received.to_ascii_uppercase().contains("SETINFO"),
            "no CLIENT SETINFO in a connection's setup: {received:?}"
        );
    }
}

/// A listener whose accept queue is full, so that the kernel drops every new `SYN`: a connect
/// to it never completes. Returns its port, the listener and the connections filling it (the
/// caller keeps both alive).
fn never_accepting_node() -> (u16, TcpListener, Vec<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a full listener");
    let addr = listener.local_addr().expect("its address");
    let mut filling = Vec::new();
    // std listens with a backlog of 128; the queue is full after at most a few more.
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(stream) => filling.push(stream),
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => break,
            Err(error) => panic!("filling the listener's queue: {error}"),
        }
        assert!(filling.len() < 10_000, "the listener's queue never filled");
    }
    (addr.port(), listener, filling)
}

/// A Cluster URL whose only node accepts the connection and never answers: `NetworkTimeout`,
/// after one wait (not one per command of the connection's setup, nor a second connection to
/// diagnose the first).
#[test]
fn a_silent_cluster_node_is_a_network_timeout() {
    let node = SilentNode::start();
    let port = node.port;
    let started = Instant::now();
    let err = within_a_minute(move || {
        impatient_redis(&format!("redis-cluster://:{PASSWORD}@127.0.0.1:{port}/"))
            .build()
            .unwrap_err()
    });
    eprintln!("silent Cluster node: {:?}: {err}", started.elapsed());
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert!(err.message().contains("no answer in time"), "{err}");
    assert!(!format!("{err} {err:?}").contains(PASSWORD), "{err:?}");
    node.assert_one_wait(&err);
}

/// The same for one server, with a password (`AUTH` is the one command its setup needs).
#[test]
fn a_silent_server_is_a_network_timeout_after_one_wait() {
    let node = SilentNode::start();
    let port = node.port;
    let started = Instant::now();
    let err = within_a_minute(move || {
        impatient_redis(&format!("redis://:{PASSWORD}@127.0.0.1:{port}/"))
            .build()
            .unwrap_err()
    });
    eprintln!("silent server: {:?}: {err}", started.elapsed());
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert!(!format!("{err} {err:?}").contains(PASSWORD), "{err:?}");
    node.assert_one_wait(&err);
}

/// A Sentinel URL whose only Sentinel never answers: `NetworkTimeout`, after one wait.
#[test]
fn a_silent_sentinel_is_a_network_timeout() {
    let node = SilentNode::start();
    let port = node.port;
    let started = Instant::now();
    let err = within_a_minute(move || {
        impatient_redis(&format!(
            "redis-sentinel://127.0.0.1:{port}/mymaster?sentinel_password={PASSWORD}"
        ))
        .build()
        .unwrap_err()
    });
    eprintln!("silent Sentinel: {:?}: {err}", started.elapsed());
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert!(!format!("{err} {err:?}").contains(PASSWORD), "{err:?}");
    node.assert_one_wait(&err);
}

/// A Cluster URL whose only node never completes the TCP handshake: `NetworkTimeout`.
#[test]
fn a_cluster_node_that_never_accepts_is_a_network_timeout() {
    let (port, listener, filling) = never_accepting_node();
    let started = Instant::now();
    let err = within_a_minute(move || {
        impatient_redis(&format!("redis-cluster://127.0.0.1:{port}/"))
            .build()
            .unwrap_err()
    });
    eprintln!(
        "never-accepting Cluster node: {:?}: {err}",
        started.elapsed()
    );
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    drop((listener, filling));
}

/// Credentials the Cluster's nodes refuse: `AuthFailed`, without the password.
#[test]
fn refused_cluster_credentials_are_auth_failed() {
    let url = shared_cluster().url().replace(
        "redis-cluster://",
        &format!("redis-cluster://nobody:{PASSWORD}@"),
    );
    let err = impatient_redis(&url).build().unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    assert!(!format!("{err} {err:?}").contains(PASSWORD), "{err:?}");
}

/// Credentials the primary refuses (the URL's own), or the Sentinels refuse
/// (`sentinel_user`/`sentinel_password`): `AuthFailed`, without the password.
#[test]
fn refused_sentinel_deployment_credentials_are_auth_failed() {
    let url = shared_sentinels().url();
    let primary = url.replace(
        "redis-sentinel://",
        &format!("redis-sentinel://nobody:{PASSWORD}@"),
    );
    let sentinels = format!("{url}?sentinel_user=nobody&sentinel_password={PASSWORD}");
    for url in [primary, sentinels] {
        let err = impatient_redis(&url).build().unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthFailed, "{url}: {err}");
        assert!(!format!("{err} {err:?}").contains(PASSWORD), "{err:?}");
    }
}
