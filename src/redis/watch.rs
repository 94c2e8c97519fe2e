//! Hearing of releases: the release scripts (and the opt-in cleanup) `PUBLISH` the user key on
//! the channel `<lock key>:released`; a watch holds one connection subscribed to the pattern of
//! all such channels under the prefix, and reports every key it hears (its `Locker` keeps those
//! it waits for).
//!
//! One pattern subscription rather than a channel per waited key: the subscription never
//! changes, so the connection just reads (a read that times out between messages is only a
//! chance to look at the stop flag), and there is no window in which a new waiter is not yet
//! subscribed. The price is that every watch hears every release under its prefix — small
//! messages, and only for `Locker`s that have waited.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::Connection;

use super::config::Timeouts;
use super::errors::Server;
use super::sentinel::SentinelPrimary;
use crate::driver::{Key, OnRelease, ReleaseWatch};

/// Opens the watch's connection, with its write timeout set: to the server, to the primary the
/// Sentinels name now, or to one Cluster node after another (a Cluster delivers `PUBLISH` to
/// subscribers on every node).
pub(crate) type Opener = Box<dyn FnMut() -> redis::RedisResult<Connection> + Send>;

/// How often the watch thread looks at its stop flag while no message arrives.
const IDLE_READ: Duration = Duration::from_millis(500);
/// Pause before reconnecting after the connection failed.
const RECONNECT_GAP: Duration = Duration::from_secs(1);

/// The pattern matching every release channel under `prefix`, with glob characters escaped.
fn pattern_of(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 12);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(":*:released");
    pattern
}

/// A running watch: the thread reading the subscription stops when this is dropped.
pub(crate) struct RedisWatch {
    stop: Arc<AtomicBool>,
    /// Subscribed now (set by the watch thread).
    subscribed: Arc<AtomicBool>,
}

impl RedisWatch {
    /// Starts the watch thread on a connection of its own from `open`.
    pub(crate) fn start(
        mut open: Opener,
        prefix: &str,
        on_release: OnRelease,
    ) -> std::io::Result<RedisWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let pattern = pattern_of(prefix);
        let subscribed = Arc::new(AtomicBool::new(false));
        let (thread_stop, thread_subscribed) = (Arc::clone(&stop), Arc::clone(&subscribed));
        std::thread::Builder::new()
            .name("syncguard-rwatch".to_owned())
            .spawn(move || {
                listen(
                    &mut open,
                    &pattern,
                    &thread_stop,
                    &thread_subscribed,
                    &on_release,
                )
            })?;
        Ok(RedisWatch { stop, subscribed })
    }
}

/// Every release is reported: nothing to ask for per key.
impl ReleaseWatch for RedisWatch {
    fn watch(&self, _: &Key) {}
    fn unwatch(&self, _: &Key) {}

    fn hearing(&self) -> bool {
        self.subscribed.load(Ordering::Acquire)
    }
}

impl Drop for RedisWatch {
    fn drop(&mut self) {
        // The thread sees this within one idle read and ends, closing its connection.
        self.stop.store(true, Ordering::Release);
    }
}

/// The watch thread: subscribe, read, report; reconnect after failures until stopped.
fn listen(
    open: &mut Opener,
    pattern: &str,
    stop: &AtomicBool,
    hearing: &AtomicBool,
    on_release: &OnRelease,
) {
    while !stop.load(Ordering::Acquire) {
        let read = subscribed(open, pattern, stop, hearing, on_release);
        hearing.store(false, Ordering::Release);
        if let Err(error) = read {
            log::debug!("syncguard: Redis release watch reconnects: {error}");
            std::thread::sleep(RECONNECT_GAP);
        }
    }
}

/// One subscribed connection, read until it fails or the watch stops.
fn subscribed(
    open: &mut Opener,
    pattern: &str,
    stop: &AtomicBool,
    hearing: &AtomicBool,
    on_release: &OnRelease,
) -> redis::RedisResult<()> {
    let mut connection = open()?;
    let mut pubsub = connection.as_pubsub();
    pubsub.psubscribe(pattern)?;
    pubsub.set_read_timeout(Some(IDLE_READ))?;
    hearing.store(true, Ordering::Release);
    while !stop.load(Ordering::Acquire) {
        match pubsub.get_message() {
            Ok(message) => {
                if let Ok(key) = message.get_payload::<String>() {
                    on_release(&key);
                }
            }
            Err(error) if error.is_timeout() => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Where the release watch connects.
pub(crate) enum WatchSource {
    Server(Box<redis::Client>, Timeouts),
    Sentinel(Arc<SentinelPrimary>, Arc<Server>, Timeouts),
    Cluster(Vec<redis::Client>, Timeouts),
}

impl WatchSource {
    pub fn opener(&self) -> Opener {
        fn open(client: &redis::Client, t: Timeouts) -> redis::RedisResult<redis::Connection> {
            let connection = client.get_connection_with_timeout(t.connect)?;
            connection.set_write_timeout(Some(t.write))?;
            Ok(connection)
        }
        match self {
            WatchSource::Server(client, t) => {
                let (client, t) = (client.as_ref().clone(), *t);
                Box::new(move || open(&client, t))
            }
            WatchSource::Sentinel(primary, server, t) => {
                let (primary, server, t) = (Arc::clone(primary), Arc::clone(server), *t);
                Box::new(move || {
                    let (client, _) = primary.client(&server).map_err(|e| {
                        redis::RedisError::from(std::io::Error::other(e.message().to_owned()))
                    })?;
                    open(&client, t)
                })
            }
            WatchSource::Cluster(clients, t) => {
                // One node after another: any node hears every PUBLISH of the Cluster.
                let (clients, t) = (clients.clone(), *t);
                let mut next = 0;
                Box::new(move || {
                    let client = &clients[next % clients.len()];
                    next += 1;
                    open(client, t)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_escape_glob_characters() {
        assert_eq!(pattern_of("syncguard"), "syncguard:*:released");
        assert_eq!(pattern_of("a*b?[c]\\d"), "a\\*b\\?\\[c\\]\\\\d:*:released");
    }
}
