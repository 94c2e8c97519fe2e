//! Hostile keys and lock ids against real Redis, PostgreSQL and the Firestore emulator, beyond
//! what the contract suites already cover.
//!
//! What it proves, on each backend:
//! - one list of awkward keys — NUL, exactly `/`, `.`, `..`, `__x__`, RTL override/mark,
//!   combining vs precomposed forms (including combining marks typed in either canonical order,
//!   Hangul jamo, the Ω/Å signs), keys of exactly 512 bytes after NFC and keys that NFC
//!   *lengthens* past 512 (U+0958), emoji with ZWJ and flags, and characters that mean something
//!   to the store's query language or URL path (`%2F`, `?#`, `*`, `'`, `\`, `%_`) — goes through
//!   acquire → is_locked → lookup (by key and by id) → release with either a typed
//!   `InvalidArgument` (consistently for every operation) or the correct result; never a panic;
//! - canonically equivalent forms name one lock, and distinct keys never share a lock (no
//!   collision between, say, `.` and `..`, or a key with and without an RTL mark);
//! - with all of those locks held at once, extending or releasing under each lock id changes
//!   that lock and no other (every live lock id is tried, and every other lock is re-read);
//! - malformed or foreign lock ids (NUL, newline, `%`, `*`, `'`, non-ASCII digits, a live id
//!   with its case flipped or one character changed, all-`_`, all-`-`) are `InvalidArgument`
//!   or not-found, and leave every held lock exactly as it was.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support;
use syncguard::driver::Outcome;
use syncguard::driver::{generate_lock_id, hash_key, normalize_and_validate_key};
use syncguard::{AcquireOutcome, ErrorCode, LockBackend, Lookup, get_by_id_raw};

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
                    // Only a store that cannot hold NUL may refuse a valid key, and then every
                    // operation refuses it alike.
                    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{shown}: {err:?}");
                    assert!(key.contains('\0'), "{shown} refused: {err:?}");
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
    let malformed = [
        format!("{}\0", &live[..21]),
        format!("{}\n", &live[..21]),
        format!("{}%", &live[..21]),
        format!("{}*", &live[..21]),
        format!("{}'", &live[..21]),
        format!("{}\\", &live[..21]),
        format!("{}\u{202E}", &live[..20]),
        format!("{}０", &live[..19]),
        format!("{}٣", &live[..20]),
        "%".repeat(22),
        format!("{live}\0"),
        format!("{live}%"),
        format!("{} ", &live[..21]),
        live[..21].to_owned(),
        format!("{live}A"),
    ];
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
