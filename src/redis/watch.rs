//! Hearing of releases: the release scripts (and the opt-in cleanup) `PUBLISH` on the channel
//! `<lock key>:released`; a watch holds one connection subscribed to the pattern of all such
//! channels under the prefix, and reports the keys its `Locker` waits for.
//!
//! One pattern subscription rather than a channel per waited key: the subscription never
//! changes, so the connection just reads (a read that times out between messages is only a
//! chance to look at the stop flag), and there is no window in which a new waiter is not yet
//! subscribed. The price is that every watch hears every release under its prefix and drops
//! those nobody waits for — small messages, and only while a `Locker` waits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::Client;

use crate::driver::{Key, OnRelease, ReleaseWatch};

/// How often the watch thread looks at its stop flag while no message arrives.
const IDLE_READ: Duration = Duration::from_millis(500);
/// Pause before reconnecting after the connection failed.
const RECONNECT_GAP: Duration = Duration::from_secs(1);

/// The channel a release of the lock stored under `lock_key` is announced on.
pub(crate) fn channel_of(lock_key: &str) -> String {
    format!("{lock_key}:released")
}

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

/// A running watch: the channels waited for, and the thread reading the subscription.
pub(crate) struct RedisWatch {
    shared: Arc<Shared>,
    /// A user key's release channel (`None` for a key this store cannot hold).
    channel_for: ChannelFor,
}

/// A user key's release channel.
type ChannelFor = Box<dyn Fn(&Key) -> Option<String> + Send + Sync>;

struct Shared {
    /// Release channel → (normalised user key, waiters).
    waited: Mutex<HashMap<String, (String, usize)>>,
    stop: AtomicBool,
}

impl RedisWatch {
    /// Starts the watch thread on a connection of its own from `client`.
    pub(crate) fn start(
        client: Client,
        connect_timeout: Duration,
        prefix: &str,
        channel_for: impl Fn(&Key) -> Option<String> + Send + Sync + 'static,
        on_release: OnRelease,
    ) -> std::io::Result<RedisWatch> {
        let shared = Arc::new(Shared {
            waited: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
        });
        let pattern = pattern_of(prefix);
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("syncguard-rwatch".to_owned())
            .spawn(move || {
                listen(
                    &client,
                    connect_timeout,
                    &pattern,
                    &thread_shared,
                    &on_release,
                );
            })?;
        Ok(RedisWatch {
            shared,
            channel_for: Box::new(channel_for),
        })
    }

    fn waited(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, usize)>> {
        self.shared
            .waited
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl ReleaseWatch for RedisWatch {
    fn watch(&self, key: &Key) {
        if let Some(channel) = (self.channel_for)(key) {
            self.waited()
                .entry(channel)
                .or_insert_with(|| (key.as_str().to_owned(), 0))
                .1 += 1;
        }
    }

    fn unwatch(&self, key: &Key) {
        if let Some(channel) = (self.channel_for)(key) {
            let mut waited = self.waited();
            if let Some((_, waiters)) = waited.get_mut(&channel) {
                *waiters -= 1;
                if *waiters == 0 {
                    waited.remove(&channel);
                }
            }
        }
    }
}

impl Drop for RedisWatch {
    fn drop(&mut self) {
        // The thread sees this within one idle read and ends, closing its connection.
        self.shared.stop.store(true, Ordering::Release);
    }
}

/// The watch thread: subscribe, read, report; reconnect after failures until stopped.
fn listen(
    client: &Client,
    connect_timeout: Duration,
    pattern: &str,
    shared: &Shared,
    on_release: &OnRelease,
) {
    while !shared.stop.load(Ordering::Acquire) {
        if let Err(error) = subscribed(client, connect_timeout, pattern, shared, on_release) {
            log::debug!("syncguard: Redis release watch reconnects: {error}");
            std::thread::sleep(RECONNECT_GAP);
        }
    }
}

/// One subscribed connection, read until it fails or the watch stops.
fn subscribed(
    client: &Client,
    connect_timeout: Duration,
    pattern: &str,
    shared: &Shared,
    on_release: &OnRelease,
) -> redis::RedisResult<()> {
    let mut connection = client.get_connection_with_timeout(connect_timeout)?;
    connection.set_write_timeout(Some(connect_timeout))?;
    let mut pubsub = connection.as_pubsub();
    pubsub.psubscribe(pattern)?;
    pubsub.set_read_timeout(Some(IDLE_READ))?;
    while !shared.stop.load(Ordering::Acquire) {
        match pubsub.get_message() {
            Ok(message) => {
                let channel = message.get_channel_name();
                let key = shared
                    .waited
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(channel)
                    .map(|(key, _)| key.clone());
                if let Some(key) = key {
                    on_release(&key);
                }
            }
            Err(error) if error.is_timeout() => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_escape_glob_characters() {
        assert_eq!(pattern_of("syncguard"), "syncguard:*:released");
        assert_eq!(pattern_of("a*b?[c]\\d"), "a\\*b\\?\\[c\\]\\\\d:*:released");
        assert_eq!(channel_of("syncguard:job"), "syncguard:job:released");
    }
}
