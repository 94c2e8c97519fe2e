//! Hostile keys and lock ids against real Redis, PostgreSQL and the Firestore emulator, beyond
//! what the contract suites already cover.
//!
//! What it proves, on each backend:
//! - every malformed input — keys empty or too long after NFC (including one that NFC
//!   *lengthens* past 512 bytes), lock ids of the wrong shape, TTLs that are not a whole number
//!   of milliseconds from 1 ms to `MAX_TTL_MS`, and on PostgreSQL keys holding NUL — is refused
//!   with `InvalidArgument` by every operation (backend, lookup helpers, `Locker`) *before any
//!   I/O*: the backend talks to its server through a proxy that by then refuses every
//!   connection and has cut the open ones, and the proxy (and, for Firestore, the backend's
//!   request counter) sees nothing — so no answer depends on how fast a server replies;
//! - one list of awkward but valid keys — NUL, exactly `/`, `.`, `..`, `__x__`, RTL
//!   override/mark, combining vs precomposed forms (including combining marks typed in either
//!   canonical order, Hangul jamo, the Ω/Å signs), keys of exactly 512 bytes after NFC, emoji
//!   with ZWJ and flags, and characters that mean something to the store's query language or
//!   URL path (`%2F`, `?#`, `*`, `'`, `\`, `%_`) — goes through acquire → is_locked → lookup
//!   (by key and by id) → release with the correct result (or, for NUL on a store that cannot
//!   hold it, the refusal above); never a panic;
//! - canonically equivalent forms name one lock, and distinct keys never share a lock (no
//!   collision between, say, `.` and `..`, or a key with and without an RTL mark);
//! - with all of those locks held at once, extending or releasing under each lock id changes
//!   that lock and no other (every live lock id is tried, and every other lock is re-read);
//! - malformed or foreign lock ids (NUL, newline, `%`, `*`, `'`, non-ASCII digits, a live id
//!   with its case flipped or one character changed, all-`_`, all-`-`) are `InvalidArgument`
//!   or not-found, and leave every held lock exactly as it was.
//!
//! The walk over valid keys talks to the servers through the shared backends, whose timeouts
//! are hang guards only ([`support::PATIENT`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support;
use crate::support::proxy::{FaultProxy, Mode};
use syncguard::driver::Outcome;
use syncguard::driver::{MAX_TTL_MS, Ttl, generate_lock_id, hash_key, normalize_and_validate_key};
use syncguard::firestore::FirestoreBackend;
use syncguard::{
    AcquireOutcome, ErrorCode, LockBackend, LockOptions, Locker, Lookup, get_by_id, get_by_id_raw,
    get_by_key, get_by_key_raw, owns,
};

const TTL: Duration = Duration::from_secs(60);
const LONGER: Duration = Duration::from_secs(90);

/// Groups of keys; the keys within a group are canonically equivalent (one lock), keys of
/// different groups are not. `id` makes most groups unique to one run; the bare `/`, `.`, `..`
/// are used as they are: the servers belong to this test process, and no other test uses
/// those keys.
fn key_groups(id: &str) -> Vec<Vec<String>> {
    // Each key as written, with `{id}` standing for `id`.
    const TEMPLATES: &[&[&str]] = &[
        &["nul\0{id}"],
        &["\0{id}\0"],
        &["/"],
        &["//"],
        &["."],
        &[".."],
        &["../{id}/.."],
        &["__{id}__"],
        &["__.{id}.__"],
        &["rtl\u{202E}{id}\u{202C}"],
        &["rtl{id}"],
        &["\u{200F}{id}"],
        &["caf\u{e9}{id}", "cafe\u{301}{id}"],
        &["q\u{323}\u{307}{id}", "q\u{307}\u{323}{id}"],
        &["\u{1100}\u{1161}{id}", "\u{AC00}{id}"],
        &["\u{2126}\u{212B}{id}", "\u{3A9}\u{C5}{id}"],
        &["👨\u{200D}👩\u{200D}👧🇺🇳👍🏽{id}"],
        &["%2F..%2F{id}?a=b#frag"],
        &["*{id}[a-z]?"],
        &["'; DROP TABLE syncguard_locks; --{id}"],
        &["\\{id}%_"],
        &["\u{FEFF}{id}\r\n"],
    ];
    let mut groups: Vec<Vec<String>> = TEMPLATES
        .iter()
        .map(|group| group.iter().map(|key| key.replace("{id}", id)).collect())
        .collect();
    // 512 bytes after NFC, 768 as typed.
    let decomposed_512 = format!("{id}{}", "e\u{301}".repeat(245));
    let max = format!("{id}{}", "x".repeat(512 - 22));
    groups.extend([
        // Same bytes: listed once more to check `Locked`, not a second lock.
        vec![max.clone(), max],
        vec![
            decomposed_512.clone(),
            normalize_and_validate_key(&decomposed_512).unwrap(),
        ],
        vec![format!("{id}{}", "x".repeat(513 - 22))],
        // 22 + 3 × 163 = 511 bytes as typed; NFC turns each U+0958 (3 bytes) into 6.
        vec![format!("{id}{}", "\u{958}".repeat(163))],
    ]);
    groups
}

/// The whole hostile-key walk on one backend.
fn hostile_keys<B: LockBackend>(backend: &B) {
    let id = generate_lock_id();
    let groups = key_groups(&id);
    let name = backend.capabilities().backend;
    // NFC key → (lock id, expires_at_ms, fence value).
    let mut held: BTreeMap<String, (String, i64, u64)> = BTreeMap::new();
    // Groups refused with InvalidArgument (too long after NFC, or NUL where the store has none).
    let mut refused = 0;

    for group in &groups {
        for (i, key) in group.iter().enumerate() {
            let shown = format!(
                "{name}: {:?}… ({} bytes)",
                key.chars().take(24).collect::<String>(),
                key.len()
            );
            let Ok(normalized) = normalize_and_validate_key(key) else {
                // Too long after NFC: refused by every operation, before any I/O.
                for code in [
                    backend.acquire(key, TTL).map(|_| ()).err(),
                    backend.is_locked(key).map(|_| ()).err(),
                    backend.lookup(Lookup::Key(key)).map(|_| ()).err(),
                ] {
                    assert_eq!(
                        code.map(|e| e.code()),
                        Some(ErrorCode::InvalidArgument),
                        "{shown}"
                    );
                }
                refused += usize::from(i == 0);
                continue;
            };
            let outcome = match backend.acquire(key, TTL) {
                Ok(outcome) => outcome,
                Err(err) => {
                    // Only a store that cannot hold NUL may refuse a valid key (before any I/O:
                    // see `refused_before_any_io`), and then every operation refuses it alike.
                    // Anything else is the call failing, not a refusal.
                    assert!(
                        key.contains('\0') && err.code() == ErrorCode::InvalidArgument,
                        "{shown}: acquire failed: {err:?}"
                    );
                    let is_locked = backend.is_locked(key).unwrap_err();
                    assert_eq!(is_locked.code(), ErrorCode::InvalidArgument, "{shown}");
                    let lookup = backend.lookup(Lookup::Key(key)).unwrap_err();
                    assert_eq!(lookup.code(), ErrorCode::InvalidArgument, "{shown}");
                    refused += usize::from(i == 0);
                    continue;
                }
            };
            match outcome {
                AcquireOutcome::Acquired(lease) => {
                    assert_eq!(i, 0, "{shown}: an equivalent form got a second lock");
                    assert!(!held.contains_key(&normalized), "{shown}: collision");
                    held.insert(
                        normalized.clone(),
                        (lease.lock_id, lease.expires_at_ms, lease.fence.value()),
                    );
                }
                AcquireOutcome::Locked => {
                    assert!(i > 0, "{shown}: fresh key reported locked (collision?)");
                }
            }
            let (lock_id, expires, fence) = held[&normalized].clone();
            assert!(backend.is_locked(key).unwrap(), "{shown}");
            for form in group {
                assert!(backend.is_locked(form).unwrap(), "{shown}: equivalent form");
            }
            let info = backend.lookup(Lookup::Key(key)).unwrap().expect("held");
            assert_eq!(info.key_hash, hash_key(&normalized), "{shown}");
            assert_eq!(info.lock_id_hash, hash_key(&lock_id), "{shown}");
            assert_eq!(info.expires_at_ms, expires, "{shown}");
            assert_eq!(info.fence.value(), fence, "{shown}");
            let raw = get_by_id_raw(backend, &lock_id).unwrap().expect("held");
            assert_eq!(raw.key, normalized, "{shown}: stored key is the NFC form");
            assert_eq!(
                backend.lookup(Lookup::LockId(&lock_id)).unwrap(),
                Some(info)
            );
        }
    }
    assert_eq!(
        held.len() + refused,
        groups.len(),
        "{name}: one lock per group"
    );
    assert!(refused <= 4, "{name}: refused {refused} groups");

    let all_unchanged = |held: &BTreeMap<String, (String, i64, u64)>, what: &str| {
        for (key, (lock_id, expires, fence)) in held {
            let info = backend
                .lookup(Lookup::Key(key))
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: {what} released {:?}", hash_key(key)));
            assert_eq!(info.lock_id_hash, hash_key(lock_id), "{name}: {what}");
            assert_eq!(
                info.expires_at_ms, *expires,
                "{name}: {what} changed an expiry"
            );
            assert_eq!(info.fence.value(), *fence, "{name}: {what}");
        }
    };

    foreign_lock_ids(backend, &held);
    all_unchanged(&held, "a foreign lock id");

    // Every live lock id, in turn, extends its own lock and no other.
    let keys: Vec<String> = held.keys().cloned().collect();
    for key in &keys {
        let lock_id = held[key].0.clone();
        let new_expiry = backend.extend(&lock_id, LONGER).unwrap().expect("extended");
        assert!(
            new_expiry > held[key].1,
            "{name}: extend moved the expiry forward"
        );
        held.get_mut(key).unwrap().1 = new_expiry;
        all_unchanged(&held, "extend under another lock id");
    }
    // … and releases its own lock and no other.
    for key in &keys {
        let (lock_id, _, _) = held.remove(key).unwrap();
        assert!(backend.release(&lock_id).unwrap(), "{name}");
        assert!(!backend.is_locked(key).unwrap(), "{name}");
        assert!(
            !backend.release(&lock_id).unwrap(),
            "{name}: released twice"
        );
        assert_eq!(
            backend.extend(&lock_id, TTL).unwrap(),
            None,
            "{name}: resurrected"
        );
        all_unchanged(&held, "release under another lock id");
    }
}

/// Malformed ids are `InvalidArgument`; valid-shaped unknown ids are not-found. The caller
/// checks afterwards that no lock changed.
fn foreign_lock_ids<B: LockBackend>(backend: &B, held: &BTreeMap<String, (String, i64, u64)>) {
    let name = backend.capabilities().backend;
    let live = &held.values().next().expect("some lock held").0;
    let malformed = malformed_lock_ids_like(live);
    for bad in &malformed {
        let shown = format!("{name}: lock id {bad:?}");
        let err = backend.release(bad).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{shown}");
        let err = backend.extend(bad, LONGER).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{shown}");
        let err = crate::support::release_outcome(backend, bad).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{shown}");
        let err = backend.lookup(Lookup::LockId(bad)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{shown}");
    }

    let flip_case: String = live
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    let one_changed = {
        let last = live.as_bytes()[21];
        let replacement = if last == b'A' { 'B' } else { 'A' };
        format!("{}{replacement}", &live[..21])
    };
    let mut unknown = vec![
        "_".repeat(22),
        "-".repeat(22),
        "A".repeat(22),
        one_changed,
        generate_lock_id(),
    ];
    if flip_case != *live {
        unknown.push(flip_case);
    }
    for stranger in &unknown {
        if held.values().any(|(id, _, _)| id == stranger) {
            continue;
        }
        let shown = format!("{name}: lock id {stranger:?}");
        assert!(!backend.release(stranger).unwrap(), "{shown}");
        assert_eq!(backend.extend(stranger, LONGER).unwrap(), None, "{shown}");
        assert!(
            matches!(
                crate::support::release_outcome(backend, stranger).unwrap(),
                Outcome::NotFound | Outcome::Expired | Outcome::NotOwner
            ),
            "{shown}"
        );
        assert!(
            matches!(
                crate::support::extend_outcome(backend, stranger, LONGER).unwrap(),
                Outcome::NotFound | Outcome::Expired | Outcome::NotOwner
            ),
            "{shown}"
        );
        assert_eq!(
            backend.lookup(Lookup::LockId(stranger)).unwrap(),
            None,
            "{shown}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Refused before any I/O
// ---------------------------------------------------------------------------------------------

/// Lock ids of the wrong shape, made from a well-formed one.
fn malformed_lock_ids() -> Vec<String> {
    malformed_lock_ids_like(&generate_lock_id())
}

/// Lock ids of the wrong shape that differ from `live` by a character or two.
fn malformed_lock_ids_like(live: &str) -> Vec<String> {
    vec![
        String::new(),
        "short".to_owned(),
        format!("{}\0", &live[..21]),
        format!("{}\n", &live[..21]),
        format!("{}%", &live[..21]),
        format!("{}*", &live[..21]),
        format!("{}'", &live[..21]),
        format!("{}\\", &live[..21]),
        format!("{}+", &live[..21]),
        format!("{}=", &live[..21]),
        format!("{}/", &live[..21]),
        format!("{}\u{202E}", &live[..20]),
        format!("{}０", &live[..19]),
        format!("{}٣", &live[..20]),
        "%".repeat(22),
        format!("{live}\0"),
        format!("{live}%"),
        format!("{} ", &live[..21]),
        format!(" {}", &live[..21]),
        live[..21].to_owned(),
        format!("{live}A"),
    ]
}

/// TTLs that are not a whole number of milliseconds from 1 ms to `MAX_TTL_MS`.
fn malformed_ttls() -> Vec<Duration> {
    vec![
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(999),
        Duration::from_micros(1500),
        Duration::from_nanos(30_000_000_001),
        Duration::from_millis(MAX_TTL_MS as u64 + 1),
        Duration::MAX,
    ]
}

/// Keys no operation accepts on a store: empty or over 512 bytes after NFC (one typed in 511
/// bytes that NFC lengthens past 512), and, where the store cannot hold NUL, keys with NUL.
fn malformed_keys(refuses_nul: bool) -> Vec<String> {
    let mut keys = vec![
        String::new(),
        "x".repeat(513),
        "\u{958}".repeat(170),
        format!("{}{}", "x".repeat(22), "\u{958}".repeat(163)),
        "e\u{301}".repeat(257),
    ];
    if refuses_nul {
        keys.extend(["\0".to_owned(), "nul\0key".to_owned(), "\0\0".to_owned()]);
    }
    keys
}

/// Every malformed input through every operation is `InvalidArgument`, and nothing reaches the
/// network: `proxy`, the backend's only way to its server, refuses new connections and has cut
/// the open ones (a call that did any I/O would fail with a transport error instead), and it
/// counts no connection attempt. Returns how many calls were refused.
fn refused_before_any_io<B: LockBackend + 'static>(
    backend: Arc<B>,
    proxy: &FaultProxy,
    refuses_nul: bool,
) -> usize {
    // A first call through the proxy leaves a pooled connection behind: cut below, it would
    // fail any call that used it.
    assert!(!backend.is_locked(&support::unique("warm-up")).unwrap());
    proxy.set_mode(Mode::Refuse);
    proxy.cut_all();
    let connections = proxy.connections();
    let name = backend.capabilities().backend;
    let locker = Locker::new(Arc::clone(&backend));
    let b = &*backend;
    // (what was called, its result)
    let mut calls: Vec<(String, syncguard::Result<()>)> = Vec::new();
    for key in malformed_keys(refuses_nul) {
        let shown = format!(
            "key {:?}… ({} bytes)",
            key.chars().take(8).collect::<String>(),
            key.len()
        );
        calls.extend(
            [
                ("acquire", b.acquire(&key, TTL).map(drop)),
                ("is_locked", b.is_locked(&key).map(drop)),
                ("lookup", b.lookup(Lookup::Key(&key)).map(drop)),
                ("lookup_raw", b.lookup_raw(Lookup::Key(&key)).map(drop)),
                ("get_by_key", get_by_key(b, &key).map(drop)),
                ("get_by_key_raw", get_by_key_raw(b, &key).map(drop)),
                ("Locker::lock", locker.lock(&key).map(drop)),
                ("Locker::try_lock", locker.try_lock(&key).map(drop)),
                (
                    "Locker::with_lock",
                    locker.with_lock(&key, |_| ()).map(drop),
                ),
            ]
            .map(|(call, result)| (format!("{call} {shown}"), result)),
        );
    }
    for lock_id in malformed_lock_ids() {
        let shown = format!("lock id {lock_id:?}");
        calls.extend(
            [
                ("release", b.release(&lock_id).map(drop)),
                ("extend", b.extend(&lock_id, TTL).map(drop)),
                ("lookup", b.lookup(Lookup::LockId(&lock_id)).map(drop)),
                (
                    "lookup_raw",
                    b.lookup_raw(Lookup::LockId(&lock_id)).map(drop),
                ),
                ("get_by_id", get_by_id(b, &lock_id).map(drop)),
                ("get_by_id_raw", get_by_id_raw(b, &lock_id).map(drop)),
                ("owns", owns(b, &lock_id).map(drop)),
                (
                    "release_lease",
                    support::release_outcome(b, &lock_id).map(drop),
                ),
                (
                    "extend_lease",
                    support::extend_outcome(b, &lock_id, TTL).map(drop),
                ),
            ]
            .map(|(call, result)| (format!("{call} {shown}"), result)),
        );
    }
    let (key, lock_id) = (support::unique("ttl"), generate_lock_id());
    for ttl in malformed_ttls() {
        let options = LockOptions::default().ttl(ttl);
        calls.extend(
            [
                ("Ttl::new", Ttl::new(ttl).map(drop)),
                ("acquire", b.acquire(&key, ttl).map(drop)),
                ("extend", b.extend(&lock_id, ttl).map(drop)),
                (
                    "extend_lease",
                    support::extend_outcome(b, &lock_id, ttl).map(drop),
                ),
                (
                    "Locker::lock_with",
                    locker.lock_with(&key, &options).map(drop),
                ),
            ]
            .map(|(call, result)| (format!("{call} ttl {ttl:?}"), result)),
        );
    }
    let count = calls.len();
    for (call, result) in calls {
        syncguard::testing::support::assert_invalid(result, &format!("{name}: {call}"));
    }
    assert_eq!(
        proxy.connections(),
        connections,
        "{name}: a refused call opened a connection"
    );
    count
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[test]
fn redis_refuses_malformed_input_before_any_io() {
    let proxy = FaultProxy::start(local(support::shared_redis().port));
    let backend = support::patient_redis(&format!("redis://127.0.0.1:{}/", proxy.port()))
        .build()
        .unwrap();
    refused_before_any_io(Arc::new(backend), &proxy, false);
}

#[test]
fn postgres_refuses_malformed_input_before_any_io() {
    support::shared_postgres_with_tables();
    let proxy = FaultProxy::start(local(support::shared_postgres().port));
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{}/postgres",
        support::PG_USER,
        support::PG_PASSWORD,
        proxy.port()
    );
    let backend = support::patient_postgres(&url).build().unwrap();
    refused_before_any_io(Arc::new(backend), &proxy, true);
}

#[test]
fn firestore_refuses_malformed_input_before_any_io() {
    let proxy = FaultProxy::start(local(support::shared_firestore().port));
    let backend = Arc::new(
        FirestoreBackend::builder()
            .project(support::FIRESTORE_PROJECT)
            .emulator_host(format!("127.0.0.1:{}", proxy.port()))
            .timeout(support::PATIENT)
            .build()
            .unwrap(),
    );
    let before = backend.stats().requests;
    let refused = refused_before_any_io(Arc::clone(&backend), &proxy, false);
    // The warm-up is the one request.
    assert_eq!(
        backend.stats().requests,
        before + 1,
        "after {refused} refusals"
    );
}

// ---------------------------------------------------------------------------------------------
// The walk over valid keys, on real servers
// ---------------------------------------------------------------------------------------------

#[test]
fn redis_hostile_keys_and_lock_ids() {
    hostile_keys(&support::shared_redis_backend());
}

#[test]
fn postgres_hostile_keys_and_lock_ids() {
    hostile_keys(&support::shared_postgres_backend());
}

#[test]
fn firestore_hostile_keys_and_lock_ids() {
    hostile_keys(&support::shared_firestore_backend());
}
