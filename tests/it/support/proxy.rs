//! A fault-injecting TCP proxy for the chaos tests, std only.
//!
//! `FaultProxy::start(upstream)` listens on `127.0.0.1:0` and forwards every connection to
//! `upstream`, with two threads per connection (one per direction). Faults:
//! - [`set_latency`](FaultProxy::set_latency): each chunk the client sends waits this long
//!   before it is forwarded (so one request/response round trip pays it once);
//! - [`set_mode`](FaultProxy::set_mode): [`Mode::Refuse`] closes new connections at once;
//!   [`Mode::BlackHole`] accepts new connections and, on new and existing connections alike,
//!   reads and discards whatever either side sends, never answering (connections accepted
//!   during the black hole have no upstream and are closed once it ends);
//!   [`Mode::DropReplies`] forwards what clients send and discards what the upstream answers
//!   (a request that lands and whose answer is lost);
//! - [`cut_all`](FaultProxy::cut_all) closes every live connection now, both sides.
//! - [`cut_answer_to`](FaultProxy::cut_answer_to): the next request that contains some bytes
//!   reaches the server, and its connection is closed, both sides, as the answer comes back,
//!   which the client never sees (a call carried out whose answer was lost).
//!
//! Every thread polls with short read timeouts and every socket is shut down on `Drop`, so
//! no thread is left blocked once the proxy is gone.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How often blocked reads and accepts wake up to look at the proxy's state.
const POLL: Duration = Duration::from_millis(20);

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything (after the configured latency).
    Pass,
    /// Close new connections at once; existing ones keep passing traffic.
    Refuse,
    /// Accept, read and discard, never answer: for new and existing connections.
    BlackHole,
    /// Forward what clients send, discard what the upstream answers: for new and existing
    /// connections.
    DropReplies,
}

impl Mode {
    fn from_u8(value: u8) -> Mode {
        match value {
            1 => Mode::Refuse,
            2 => Mode::BlackHole,
            3 => Mode::DropReplies,
            _ => Mode::Pass,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            Mode::Pass => 0,
            Mode::Refuse => 1,
            Mode::BlackHole => 2,
            Mode::DropReplies => 3,
        }
    }
}

/// One live connection: the client side and, unless black-holed from the start, the upstream.
struct Link {
    id: u64,
    client: TcpStream,
    upstream: Option<TcpStream>,
}

impl Link {
    fn close(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        if let Some(upstream) = &self.upstream {
            let _ = upstream.shutdown(Shutdown::Both);
        }
    }
}

struct Shared {
    upstream: SocketAddr,
    latency_us: AtomicU64,
    mode: AtomicU8,
    stop: AtomicBool,
    next_id: AtomicU64,
    connections: AtomicU64,
    faults: AtomicU64,
    links: Mutex<Vec<Link>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// What the request whose answer is to be lost contains ([`FaultProxy::cut_answer_to`]).
    cut_answer_to: Mutex<Option<Vec<u8>>>,
    /// The link that sent that request: its next answer closes it.
    doomed: AtomicU64,
    answers_cut: AtomicU64,
    /// The lost answer is held back rather than cut ([`FaultProxy::hold_answer_to`]).
    hold_back: AtomicBool,
    /// The link whose answers are held back from then on: none reaches its client.
    muted: AtomicU64,
}

/// No link is doomed.
const NO_LINK: u64 = u64::MAX;

impl Shared {
    fn mode(&self) -> Mode {
        Mode::from_u8(self.mode.load(Ordering::SeqCst))
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn fault(&self) {
        self.faults.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether `chunk`, sent by the client of link `id`, is the request whose answer is to be
    /// lost: then the link is doomed, before the request goes on (so before any answer).
    fn dooms(&self, id: u64, chunk: &[u8]) {
        let mut needle = self
            .cut_answer_to
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let found = needle
            .as_deref()
            .is_some_and(|needle| chunk.windows(needle.len()).any(|w| w == needle));
        if found {
            *needle = None;
            self.doomed.store(id, Ordering::SeqCst);
        }
    }

    /// Whether the answer just read from the upstream of link `id` is the one to lose.
    fn loses_answer(&self, id: u64) -> bool {
        let lost = self
            .doomed
            .compare_exchange(id, NO_LINK, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if lost {
            self.answers_cut.fetch_add(1, Ordering::SeqCst);
            self.fault();
        }
        lost
    }

    fn links(&self) -> std::sync::MutexGuard<'_, Vec<Link>> {
        self.links.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Shuts the link down (waking its other thread) and forgets it.
    fn close_link(&self, id: u64) {
        let mut links = self.links();
        if let Some(at) = links.iter().position(|link| link.id == id) {
            links.swap_remove(at).close();
        }
    }

    fn spawn(self: &Arc<Self>, name: &str, run: impl FnOnce(Arc<Shared>) + Send + 'static) {
        let shared = Arc::clone(self);
        let handle = thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || run(shared))
            .expect("start a proxy thread");
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
    }
}

/// A TCP proxy in front of one upstream server that injects faults on demand.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream`, in [`Mode::Pass`] without latency.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            upstream,
            latency_us: AtomicU64::new(0),
            mode: AtomicU8::new(Mode::Pass.to_u8()),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            links: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            cut_answer_to: Mutex::new(None),
            doomed: AtomicU64::new(NO_LINK),
            answers_cut: AtomicU64::new(0),
            hold_back: AtomicBool::new(false),
            muted: AtomicU64::new(NO_LINK),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("proxy-accept".to_owned())
                .spawn(move || accept_loop(&listener, &shared))
                .expect("start the proxy")
        };
        FaultProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Delay added to each chunk the client sends before it is forwarded.
    pub fn set_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_us.store(us, Ordering::SeqCst);
    }

    pub fn set_mode(&self, mode: Mode) {
        self.shared.mode.store(mode.to_u8(), Ordering::SeqCst);
    }

    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    /// Closes every live connection now (both sides). Returns how many were cut.
    pub fn cut_all(&self) -> usize {
        let links: Vec<Link> = std::mem::take(&mut *self.shared.links());
        for link in &links {
            link.close();
            self.shared.fault();
        }
        links.len()
    }

    /// The next request (one chunk from a client) that contains `needle` is forwarded; when the
    /// server's answer to it arrives, the connection is closed, both sides, instead of passing
    /// the answer on: the client sees its connection end mid-call, the server has done what it
    /// was asked. Once only; [`answers_cut`](FaultProxy::answers_cut) counts the cuts.
    pub fn cut_answer_to(&self, needle: &[u8]) {
        self.shared.hold_back.store(false, Ordering::SeqCst);
        *self
            .shared
            .cut_answer_to
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(needle.to_vec());
    }

    /// As [`cut_answer_to`](FaultProxy::cut_answer_to), but the answer is held back instead:
    /// neither it nor any later answer on that connection reaches the client, and the
    /// connection stays open, so the client waits until its own deadline gives up.
    pub fn hold_answer_to(&self, needle: &[u8]) {
        self.shared.hold_back.store(true, Ordering::SeqCst);
        *self
            .shared
            .cut_answer_to
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(needle.to_vec());
    }

    /// Answers lost so far by [`cut_answer_to`](FaultProxy::cut_answer_to) and
    /// [`hold_answer_to`](FaultProxy::hold_answer_to).
    pub fn answers_cut(&self) -> u64 {
        self.shared.answers_cut.load(Ordering::SeqCst)
    }

    /// Connections accepted so far (refused ones included).
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Live connections right now.
    pub fn live(&self) -> usize {
        self.shared.links().len()
    }

    /// Faults injected so far: refused or black-holed connections, discarded chunks, cut
    /// connections.
    pub fn faults(&self) -> u64 {
        self.shared.faults.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for link in std::mem::take(&mut *self.shared.links()) {
            link.close();
        }
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for thread in threads {
            let _ = thread.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopped() {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => {
                thread::sleep(POLL);
                continue;
            }
        };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_nonblocking(false);
        let _ = client.set_nodelay(true);
        match shared.mode() {
            Mode::Refuse => {
                shared.fault();
                let _ = client.shutdown(Shutdown::Both);
            }
            Mode::BlackHole => {
                shared.fault();
                sink(shared, client);
            }
            Mode::Pass | Mode::DropReplies => {
                match TcpStream::connect_timeout(&shared.upstream, Duration::from_secs(5)) {
                    Ok(upstream) => forward(shared, client, upstream),
                    Err(_) => {
                        // The upstream is down: pass that on as a closed connection.
                        shared.fault();
                        let _ = client.shutdown(Shutdown::Both);
                    }
                }
            }
        }
    }
}

/// A connection black-holed from the start: read and discard until it closes.
fn sink(shared: &Arc<Shared>, client: TcpStream) {
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let (Ok(reader), Ok(())) = (client.try_clone(), client.set_read_timeout(Some(POLL))) else {
        return;
    };
    shared.links().push(Link {
        id,
        client,
        upstream: None,
    });
    shared.spawn("proxy-sink", move |shared| {
        let mut reader = reader;
        let mut buf = [0u8; 16 * 1024];
        // Once the black hole ends, the connection it swallowed is closed: it never had an
        // upstream to pass traffic to.
        while !shared.stopped() && shared.mode() == Mode::BlackHole {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => shared.fault(),
                Err(e) if is_timeout(&e) => {}
                Err(_) => break,
            }
        }
        shared.close_link(id);
    });
}

fn forward(shared: &Arc<Shared>, client: TcpStream, upstream: TcpStream) {
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let _ = upstream.set_nodelay(true);
    let clones = (
        client.try_clone(),
        client.try_clone(),
        upstream.try_clone(),
        upstream.try_clone(),
    );
    let (Ok(client_in), Ok(client_out), Ok(upstream_in), Ok(upstream_out)) = clones else {
        return;
    };
    if client_in.set_read_timeout(Some(POLL)).is_err()
        || upstream_in.set_read_timeout(Some(POLL)).is_err()
    {
        return;
    }
    shared.links().push(Link {
        id,
        client,
        upstream: Some(upstream),
    });
    shared.spawn("proxy-up", move |shared| {
        pump(&shared, id, client_in, upstream_out, true);
    });
    shared.spawn("proxy-down", move |shared| {
        pump(&shared, id, upstream_in, client_out, false);
    });
}

/// Copies `from` to `to` until either side closes, the link is cut or the proxy stops.
/// `delayed`: this is the client's side (what it sends pays the latency; the upstream's
/// answers are what [`Mode::DropReplies`] discards).
fn pump(shared: &Shared, id: u64, mut from: TcpStream, mut to: TcpStream, delayed: bool) {
    let mut buf = [0u8; 16 * 1024];
    while !shared.stopped() {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if is_timeout(&e) => continue,
            Err(_) => break,
        };
        let mode = shared.mode();
        if mode == Mode::BlackHole || (mode == Mode::DropReplies && !delayed) {
            shared.fault();
            continue;
        }
        if delayed {
            shared.dooms(id, &buf[..n]);
        } else if shared.loses_answer(id) {
            if !shared.hold_back.load(Ordering::SeqCst) {
                break;
            }
            shared.muted.store(id, Ordering::SeqCst);
        }
        if !delayed && shared.muted.load(Ordering::SeqCst) == id {
            continue;
        }
        if delayed {
            let latency = Duration::from_micros(shared.latency_us.load(Ordering::SeqCst));
            if !latency.is_zero() {
                thread::sleep(latency);
            }
            // The mode may have changed while the chunk waited.
            if shared.mode() == Mode::BlackHole {
                shared.fault();
                continue;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    shared.close_link(id);
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}
