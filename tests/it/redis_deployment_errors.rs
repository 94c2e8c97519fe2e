//! The codes and messages of a Redis Cluster or Sentinel deployment that cannot be used: a node
//! that never answers is a `NetworkTimeout` (one wait per node, no second round of waits to
//! explain it), credentials the servers refuse are `AuthFailed`, and no message shows the
//! password.

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use syncguard::ErrorCode;

use crate::support::{impatient_redis, shared_cluster, shared_sentinels, within_a_minute};

/// A password no server here knows, distinctive enough to find in a message.
const PASSWORD: &str = "Hunter2-secret";

/// A listener that accepts connections and never answers (nor reads): a node behind a black
/// hole. Counts the connections it took; they stay open until the process ends.
fn silent_node() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a silent node");
    let port = listener.local_addr().expect("its address").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (port, accepted)
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
/// after one attempt at it (one wait, not a second one to diagnose the first).
#[test]
fn a_silent_cluster_node_is_a_network_timeout() {
    let (port, accepted) = silent_node();
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
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection to the silent node: {err}"
    );
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
    eprintln!("never-accepting Cluster node: {:?}: {err}", started.elapsed());
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    drop((listener, filling));
}

/// Credentials the Cluster's nodes refuse: `AuthFailed`, without the password.
#[test]
fn refused_cluster_credentials_are_auth_failed() {
    let url = shared_cluster()
        .url()
        .replace("redis-cluster://", &format!("redis-cluster://nobody:{PASSWORD}@"));
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
