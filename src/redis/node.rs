//! A connection to one Cluster node, as redis-rs' cluster client uses it: deadlines from the
//! first byte, and deferred requests, which make a [`pipeline`] whose commands lie in
//! different hash slots cost one round trip (each node receives its commands before any
//! reply is awaited).
//!
//! Deadlines: a node connection is opened with the connect timeout, and its first command (the
//! client's `PING`) runs under that timeout too; after that, reads and writes have their own
//! timeouts. A node connection whose request timed out refuses further requests at once (its
//! reply may still arrive and would be taken for the next one's), so the client's immediate
//! retries after a timeout cost nothing, and the cluster connection is dropped from the pool.
//!
//! Why deferred requests: redis-rs' own cross-node pipeline (`cluster_pipe`) only runs over its
//! own node connection type, which has none of the deadlines above. So [`pipeline`] passes
//! every command through the cluster client twice. In the first pass the client routes it as
//! usual and the node connection only *writes* it, answering a placeholder. In the second the
//! client routes it again and the node connection that wrote it hands over the real reply
//! instead of writing it again; the client then deals with that reply as with any other
//! (`MOVED`, `ASK`, `TRYAGAIN` and reconnects stay its job). Routing, redirections and slot-map
//! refreshes are never ours.
//!
//! Every written command carries a tag (its pipeline, its place in it), and a node connection
//! reads replies strictly in the order it wrote, so a reply only ever goes to the command it
//! answers:
//! - a reply read before its collection (another request on that node connection came first:
//!   the `PING` of a slot-map refresh, or the collection of a command written after it) is kept
//!   for it;
//! - a collection routed to another node connection (the slot moved between the passes, the
//!   node connection was replaced) finds no reply there and runs the command again — the
//!   commands syncguard pipelines are safe to repeat: an acquire by its own lock id, an
//!   extension, writes of index entries;
//! - a reply whose collection never comes (a pipeline given up halfway) is dropped when read.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::cluster::Connect;
use redis::{Cmd, Connection, ConnectionLike, IntoConnectionInfo, RedisError, RedisResult, Value};

/// What a pipeline of a connection answers: its replies, in order.
pub(super) type Replies = RedisResult<Vec<Value>>;

/// A cluster connection over [`NodeConnection`]s.
pub(crate) type ClusterConnection = redis::cluster::ClusterConnection<NodeConnection>;

/// Runs `commands` on a Cluster as a pipeline: every command is written to its node before any
/// reply is read, so the whole costs one round trip (per node, all at once). One answer per
/// command, in order; each command is still routed, redirected and retried by the cluster
/// client on its own. See the module docs.
pub(crate) fn pipeline(conn: &mut ClusterConnection, commands: &[&Cmd]) -> Vec<RedisResult<Value>> {
    let pipeline = PIPELINES.fetch_add(1, Ordering::Relaxed);
    let mut answers: Vec<Option<RedisResult<Value>>> = commands.iter().map(|_| None).collect();
    let mut written = Vec::with_capacity(commands.len());
    for (command, cmd) in commands.iter().enumerate() {
        let tag = Tag { pipeline, command };
        let (answer, claimed) = deferred(Pass::Write, tag, cmd, || cmd.query::<Value>(conn));
        match (answer, claimed) {
            (Ok(_), true) => written.push(command),
            // Not written: the client's error, or (were it ever not deferred) its real reply.
            (answer, _) => answers[command] = Some(answer),
        }
    }
    // Last to first: the first command's node connection is the last one used, so that a
    // `WAIT` sent after a pipeline that opens with its write goes to the connection that made
    // it, even when a later command's redirection refreshed the slot map in between.
    for command in written.into_iter().rev() {
        let cmd = commands[command];
        let tag = Tag { pipeline, command };
        let (answer, _) = deferred(Pass::Collect, tag, cmd, || cmd.query::<Value>(conn));
        answers[command] = Some(answer);
    }
    answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "a pipelined command got no answer",
                )))
            })
        })
        .collect()
}

/// A connection to one node; see the module docs.
pub(crate) struct NodeConnection {
    connection: Connection,
    /// A request timed out: the connection is out of step and takes no more requests.
    timed_out: bool,
    /// Deferred commands written and not yet read, oldest first.
    unread: VecDeque<Tag>,
    /// Replies of deferred commands read before their collection, oldest first.
    early: VecDeque<(Tag, Value)>,
}

/// Numbers pipelines across all threads: a pooled cluster connection moves between threads.
static PIPELINES: AtomicU64 = AtomicU64::new(0);

/// A deferred command: its pipeline, its place in it. Pipelines are numbered in the order they
/// start, so on one node connection a reply of an older pipeline is one nobody collects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tag {
    pipeline: u64,
    command: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Write the command, answer a placeholder.
    Write,
    /// Hand over the command's reply (or run it, when this node connection did not write it).
    Collect,
}

/// The command this thread is passing through the cluster client, and whether a node
/// connection has taken it.
struct Deferral {
    pass: Pass,
    tag: Tag,
    packed: Vec<u8>,
    claimed: bool,
}

thread_local! {
    static DEFERRAL: RefCell<Option<Deferral>> = const { RefCell::new(None) };
    /// The failures node connections met on this thread while [`recording_failures`] runs.
    static FAILURES: RefCell<Option<Vec<RedisError>>> = const { RefCell::new(None) };
}

/// Runs `open` (which opens a cluster connection on this thread) and returns, with its result,
/// every error its node connections met: connecting, and each request. The cluster client
/// folds the failures of its seed nodes into one error of its own that keeps only their text,
/// so without these a refused password or a node that never answers could only be reported as
/// "unavailable".
pub(crate) fn recording_failures<T>(open: impl FnOnce() -> T) -> (T, Vec<RedisError>) {
    /// Stops recording even if `open` panics.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            FAILURES.with_borrow_mut(|failures| *failures = None);
        }
    }
    FAILURES.with_borrow_mut(|failures| *failures = Some(Vec::new()));
    let reset = Reset;
    let opened = open();
    let failures = FAILURES.with_borrow_mut(|failures| failures.take().unwrap_or_default());
    drop(reset);
    (opened, failures)
}

/// Keeps `error` for [`recording_failures`], if it runs on this thread.
fn record(error: &RedisError) {
    FAILURES.with_borrow_mut(|failures| {
        if let Some(failures) = failures {
            failures.push(error.clone());
        }
    });
}

/// Runs `call` (which passes `cmd` through the cluster client) with `cmd` deferred; returns its
/// answer and whether a node connection took the command.
fn deferred<T>(pass: Pass, tag: Tag, cmd: &Cmd, call: impl FnOnce() -> T) -> (T, bool) {
    /// Clears the deferral even if `call` panics.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DEFERRAL.with_borrow_mut(|deferral| *deferral = None);
        }
    }
    DEFERRAL.with_borrow_mut(|deferral| {
        *deferral = Some(Deferral {
            pass,
            tag,
            packed: cmd.get_packed_command(),
            claimed: false,
        })
    });
    let reset = Reset;
    let answer = call();
    let claimed = DEFERRAL.with_borrow(|deferral| deferral.as_ref().is_some_and(|d| d.claimed));
    drop(reset);
    (answer, claimed)
}

/// The pass this request belongs to, if it is the deferred command and no node connection has
/// taken it yet.
fn pending_pass(packed: &[u8]) -> Option<(Pass, Tag)> {
    DEFERRAL.with_borrow(|deferral| match deferral {
        Some(d) if !d.claimed && d.packed == packed => Some((d.pass, d.tag)),
        _ => None,
    })
}

fn claim() {
    DEFERRAL.with_borrow_mut(|deferral| {
        if let Some(deferral) = deferral {
            deferral.claimed = true;
        }
    });
}

/// The pipeline this thread is running, if any: early replies of other pipelines are dropped.
fn current_pipeline() -> Option<u64> {
    DEFERRAL.with_borrow(|deferral| deferral.as_ref().map(|d| d.tag.pipeline))
}

fn deferral_active() -> bool {
    DEFERRAL.with_borrow(Option::is_some)
}

impl NodeConnection {
    fn guard<T>(&mut self, call: impl FnOnce(&mut Connection) -> RedisResult<T>) -> RedisResult<T> {
        if self.timed_out {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "an earlier request on this node connection timed out",
            )));
        }
        let result = call(&mut self.connection);
        if let Err(error) = &result {
            if error.is_timeout() {
                self.timed_out = true;
            }
            record(error);
        }
        result
    }

    /// One request: written only, collected, or sent and answered.
    fn request(&mut self, packed: &[u8]) -> RedisResult<Value> {
        match pending_pass(packed) {
            Some((Pass::Write, tag)) => {
                // Replies due are not read first: that would cost the round trip saved here.
                self.guard(|c| c.send_packed_command(packed))?;
                self.unread.push_back(tag);
                claim();
                Ok(Value::Nil)
            }
            Some((Pass::Collect, tag)) => {
                claim();
                match self.collect(tag)? {
                    Some(reply) => Ok(reply),
                    None => self.exchange(packed),
                }
            }
            None => self.exchange(packed),
        }
    }

    /// Sends a request and reads its reply, after the replies still due on this connection.
    fn exchange(&mut self, packed: &[u8]) -> RedisResult<Value> {
        self.read_unread()?;
        self.guard(|c| c.req_packed_command(packed))
    }

    /// The reply of the deferred command `tag`, if this connection wrote it. Replies read on the
    /// way that belong to the same pipeline are kept for their own collection; older ones (a
    /// pipeline given up) are dropped.
    fn collect(&mut self, tag: Tag) -> RedisResult<Option<Value>> {
        self.early
            .retain(|(early, _)| early.pipeline >= tag.pipeline);
        if let Some(at) = self.early.iter().position(|(early, _)| *early == tag) {
            return Ok(self.early.remove(at).map(|(_, reply)| reply));
        }
        if !self.unread.contains(&tag) {
            return Ok(None);
        }
        while let Some(&next) = self.unread.front() {
            let reply = self.read_one()?;
            if next == tag {
                return Ok(Some(reply));
            }
            if next.pipeline == tag.pipeline {
                self.early.push_back((next, reply));
            }
        }
        Ok(None)
    }

    /// Reads every reply still due on this connection, keeping those of the running pipeline
    /// for their collection.
    fn read_unread(&mut self) -> RedisResult<()> {
        let keep = current_pipeline();
        while let Some(&tag) = self.unread.front() {
            let reply = self.read_one()?;
            if keep == Some(tag.pipeline) {
                self.early.push_back((tag, reply));
            }
        }
        if keep.is_none() {
            self.early.clear();
        }
        Ok(())
    }

    /// Reads the reply of the oldest unread command. A reply the server sent (an error reply
    /// included) is the command's; a failure to read one is the connection's (see `guard`).
    fn read_one(&mut self) -> RedisResult<Value> {
        loop {
            // Push messages (RESP3) answer no command, as in `Connection::req_packed_command`.
            let reply = self.guard(Connection::recv_response)?;
            if !matches!(reply, Value::Push { .. }) {
                self.unread.pop_front();
                return Ok(reply);
            }
        }
    }
}

impl Connect for NodeConnection {
    fn connect<T: IntoConnectionInfo>(info: T, timeout: Option<Duration>) -> RedisResult<Self> {
        let connected = info.into_connection_info().and_then(|info| {
            // Without `CLIENT SETINFO`: redis-rs awaits every reply of its setup pipeline with
            // the whole timeout, even after the first one timed out, so a node that never
            // answers would cost one timeout per command instead of one (see `ClientFactory`).
            let settings = info.redis_settings().clone().set_skip_set_lib_name();
            <Connection as Connect>::connect(info.set_redis_settings(settings), timeout)
        });
        if let Err(error) = &connected {
            record(error);
        }
        let connection = connected?;
        // The cluster client sends a PING before it sets its own timeouts: bound it too.
        connection.set_read_timeout(timeout)?;
        connection.set_write_timeout(timeout)?;
        Ok(NodeConnection {
            connection,
            timed_out: false,
            unread: VecDeque::new(),
            early: VecDeque::new(),
        })
    }

    fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        self.read_unread()?;
        self.guard(|c| c.send_packed_command(cmd))
    }

    fn set_write_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.connection.set_write_timeout(dur)
    }

    fn set_read_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.connection.set_read_timeout(dur)
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        self.guard(Connection::recv_response)
    }
}

impl ConnectionLike for NodeConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.request(cmd)
    }

    fn req_packed_commands(&mut self, cmd: &[u8], offset: usize, count: usize) -> Replies {
        self.read_unread()?;
        self.guard(|c| c.req_packed_commands(cmd, offset, count))
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        if deferral_active() {
            return self.request(&cmd.get_packed_command());
        }
        self.read_unread()?;
        self.guard(|c| c.req_command(cmd))
    }

    fn get_db(&self) -> i64 {
        self.connection.get_db()
    }

    fn check_connection(&mut self) -> bool {
        // Its PING must not take a deferred command's reply.
        !self.timed_out && self.read_unread().is_ok() && self.connection.check_connection()
    }

    fn is_open(&self) -> bool {
        !self.timed_out && self.connection.is_open()
    }
}
