//! The backend contracts on what a backend is given: keys (length, NFC, any characters, NUL),
//! lock ids and TTLs, validated before anything is sent, and the longest TTL stored exactly.

use std::time::Duration;

use crate::driver::{
    LockId, MAX_TTL_MS, Ttl, generate_lock_id, hash_key, normalize_and_validate_key,
};
use crate::{
    AcquireOutcome, ErrorCode, LockBackend, Lookup, get_by_id, get_by_id_raw, get_by_key,
    get_by_key_raw, owns,
};

use crate::testing::support::*;

/// Seed 003 "Key Validation": empty or > 512 bytes (after NFC) is InvalidArgument; 512 is OK.
pub fn key_length_validation<B: LockBackend>(backend: &B) {
    let too_long = format!("{}{}", generate_lock_id(), "x".repeat(513 - 22));
    assert_eq!(too_long.len(), 513);
    // 22 + 246 × 2 = 514 bytes in NFC: over the limit by bytes, not by characters.
    let too_long_nfc = format!("{}{}", generate_lock_id(), "é".repeat(246));
    assert_eq!(too_long_nfc.len(), 514);
    for bad in ["", too_long.as_str(), too_long_nfc.as_str()] {
        let what = format!("key of {} bytes", bad.len());
        assert_invalid(backend.acquire(bad, LONG_TTL), &format!("acquire {what}"));
        assert_invalid(backend.is_locked(bad), &format!("is_locked {what}"));
        assert_invalid(backend.lookup(Lookup::Key(bad)), &format!("lookup {what}"));
        assert_invalid(get_by_key(backend, bad), &format!("get_by_key {what}"));
        assert_invalid(
            get_by_key_raw(backend, bad),
            &format!("get_by_key_raw {what}"),
        );
    }

    let max = format!("{}{}", generate_lock_id(), "x".repeat(512 - 22));
    assert_eq!(max.len(), 512);
    // 768 bytes as typed, 512 after NFC: the limit applies after normalisation.
    let max_nfc_decomposed = format!("{}{}", generate_lock_id(), "e\u{301}".repeat(245));
    assert_eq!(max_nfc_decomposed.len(), 22 + 245 * 3);
    let max_nfc = normalize_and_validate_key(&max_nfc_decomposed).unwrap();
    assert_eq!(max_nfc.len(), 512);
    for (key, normalised) in [(&max, &max), (&max_nfc_decomposed, &max_nfc)] {
        let lease = acquired(backend, key, LONG_TTL);
        assert_held_under(backend, key, &lease, normalised);
        assert_held_under(backend, normalised, &lease, normalised);
        assert!(backend.release(&lease.lock_id).unwrap());
        assert_free(backend, key, &lease.lock_id, "released");
    }
}

/// Seed 003 "Key Validation" NFC: "e\u{301}" and "é" name the same lock in every operation.
pub fn keys_are_nfc_normalised<B: LockBackend>(backend: &B) {
    let suffix = generate_lock_id();
    let decomposed = format!("cafe\u{301}:{suffix}");
    let composed = format!("caf\u{e9}:{suffix}");
    assert_ne!(decomposed, composed);

    let lease = acquired(backend, &decomposed, LONG_TTL);
    // Both forms see the one lock, stored under the NFC form.
    assert_held_under(backend, &composed, &lease, &composed);
    assert_held_under(backend, &decomposed, &lease, &composed);
    assert_locked_out(backend, &composed);
    assert_eq!(
        lookup_both(backend, &decomposed, &lease).key_hash,
        hash_key(&composed)
    );
    assert!(backend.release(&lease.lock_id).unwrap());
    assert_free(backend, &composed, &lease.lock_id, "released");

    // And the other way round: composed first, fence counter shared.
    let again = acquired(backend, &composed, LONG_TTL);
    assert!(
        again.fence > lease.fence,
        "both forms share one fence counter"
    );
    assert!(backend.is_locked(&decomposed).unwrap());
    assert!(backend.release(&again.lock_id).unwrap());
}

/// Seed 003 keys are opaque: '/', ':', emoji, CJK, `__x__` all work as distinct locks.
pub fn keys_with_special_characters<B: LockBackend>(backend: &B) {
    let id = generate_lock_id();
    let keys = [
        format!("a/b/c/{id}"),
        format!("/{id}/"),
        format!("ns:sub:{id}:"),
        format!("emoji 🔒🚀 {id}"),
        format!("日本語キー-{id}"),
        format!("__{id}__"),
        format!("tab\tand space {id}"),
        format!("fence:{id}"),
        format!("id:{id}"),
    ];
    let mut leases = Vec::new();
    for key in &keys {
        let lease = acquired(backend, key, LONG_TTL);
        assert_fence_format(&lease.fence);
        leases.push(lease);
    }
    for (key, lease) in keys.iter().zip(&leases) {
        assert_held_under(backend, key, lease, key);
        assert_locked_out(backend, key);
    }
    for (key, lease) in keys.iter().zip(&leases) {
        assert!(backend.release(&lease.lock_id).unwrap(), "{key:?}");
        assert!(!backend.is_locked(key).unwrap(), "{key:?}");
    }
}

/// Seed 003 keys are opaque strings: a key containing NUL works like any other — or, where the
/// store cannot hold NUL at all (PostgreSQL text), every operation refuses it with
/// `InvalidArgument` before any I/O, consistently, and nothing is locked.
pub fn keys_with_nul_work<B: LockBackend>(backend: &B) {
    let id = generate_lock_id();
    let key = format!("nul\0byte:{id}");
    let plain = format!("nulbyte:{id}");
    match backend.acquire(&key, LONG_TTL) {
        Err(refused) => {
            assert_eq!(refused.code(), ErrorCode::InvalidArgument, "{refused:?}");
            assert_invalid(backend.is_locked(&key), "is_locked of a NUL key");
            assert_invalid(backend.lookup(Lookup::Key(&key)), "lookup of a NUL key");
            assert!(!backend.is_locked(&plain).unwrap());
        }
        Ok(outcome) => {
            let lease = match outcome {
                AcquireOutcome::Acquired(lease) => lease,
                AcquireOutcome::Locked => panic!("a fresh NUL key was reported locked"),
            };
            assert_held_under(backend, &key, &lease, &key);
            assert!(
                !backend.is_locked(&plain).unwrap(),
                "NUL is part of the key"
            );
            assert!(backend.release(&lease.lock_id).unwrap());
            assert_free(backend, &key, &lease.lock_id, "released");
        }
    }
}

/// Seed 003 "Lock ID Validation": malformed ids are InvalidArgument for every op.
pub fn lock_id_validation<B: LockBackend>(backend: &B) {
    // A held lock, to prove malformed ids touch nothing.
    let key = unique_key("lock-id-validation");
    let lease = acquired(backend, &key, LONG_TTL);
    let near_miss = |c: char| format!("{}{c}", &lease.lock_id[..21]);
    let bad_ids = [
        String::new(),
        "short".to_owned(),
        near_miss('+'),
        near_miss('='),
        near_miss('/'),
        near_miss('.'),
        near_miss(' '),
        format!("{}é", &lease.lock_id[..20]),
        lease.lock_id[..21].to_owned(),
        format!("{}A", lease.lock_id),
        format!(" {}", &lease.lock_id[..21]),
    ];
    for bad in &bad_ids {
        let what = format!("lock id {bad:?}");
        assert_invalid(backend.release(bad), &format!("release {what}"));
        assert_invalid(backend.extend(bad, LONG_TTL), &format!("extend {what}"));
        assert_invalid(LockId::new(bad), &format!("LockId::new {what}"));
        assert_invalid(
            backend.lookup(Lookup::LockId(bad)),
            &format!("lookup {what}"),
        );
        assert_invalid(get_by_id(backend, bad), &format!("get_by_id {what}"));
        assert_invalid(
            get_by_id_raw(backend, bad),
            &format!("get_by_id_raw {what}"),
        );
        assert_invalid(owns(backend, bad), &format!("owns {what}"));
    }
    assert_expiry_unchanged(backend, &lease, "a rejected call");
    assert!(backend.release(&lease.lock_id).unwrap());
}

/// Seed 003 "ttlMs MUST be a positive integer": 0 / sub-ms TTLs are InvalidArgument; 1 ms OK.
/// Above [`MAX_TTL_MS`] is InvalidArgument too.
pub fn ttl_validation<B: LockBackend>(backend: &B) {
    let key = unique_key("ttl-validation");
    let bad_ttls = [
        max_ttl() + Duration::from_millis(1),
        Duration::ZERO,
        Duration::from_micros(1500),
        Duration::from_micros(999),
        Duration::from_nanos(1),
        Duration::from_nanos(30_000_000_001),
        Duration::MAX,
    ];
    for ttl in bad_ttls {
        assert_invalid(backend.acquire(&key, ttl), &format!("acquire ttl {ttl:?}"));
    }
    assert!(
        !backend.is_locked(&key).unwrap(),
        "rejected acquires took nothing"
    );

    let lease = acquired(backend, &key, LONG_TTL);
    for ttl in bad_ttls {
        assert_invalid(
            backend.extend(&lease.lock_id, ttl),
            &format!("extend ttl {ttl:?}"),
        );
        assert_invalid(Ttl::new(ttl), &format!("Ttl::new {ttl:?}"));
    }
    assert_expiry_unchanged(backend, &lease, "a rejected extend");

    // 1 ms is a valid TTL for extend (the lock is live: it had 30 s left) …
    let one_ms = Duration::from_millis(1);
    let shortened = backend
        .extend(&lease.lock_id, one_ms)
        .unwrap()
        .expect("extend(1 ms) of a live lock succeeds");
    assert!(shortened < lease.expires_at_ms);
    // … and for acquire, on a key of its own.
    let other = unique_key("ttl-validation-1ms");
    let tiny = acquired(backend, &other, one_ms);
    assert_fence_format(&tiny.fence);
    // Either may have expired by now; both must still answer without error.
    backend.release(&tiny.lock_id).unwrap();
    backend.release(&lease.lock_id).unwrap();
}

/// [`MAX_TTL_MS`] as a `Duration`.
fn max_ttl() -> Duration {
    Duration::from_millis(MAX_TTL_MS.unsigned_abs())
}

/// The longest TTL is stored exactly: the expiry an acquire or extend with [`MAX_TTL_MS`]
/// answers is the one the store keeps (read back by key and by lock id), to the millisecond.
/// (Redis' Lua `cjson` writes 14 significant digits: a bound that let `now + ttl` reach
/// 10^14 would store a rounded expiry.)
pub fn max_ttl_is_stored_exactly<B: LockBackend>(backend: &B) {
    let key = unique_key("max-ttl");
    let lease = acquired(backend, &key, max_ttl());
    assert!(
        lease.expires_at_ms - client_now_ms() > MAX_TTL_MS - 86_400_000,
        "the expiry is about now + MAX_TTL_MS: {lease:?}"
    );
    let info = lookup_both(backend, &key, &lease);
    assert_eq!(
        info.expires_at_ms, lease.expires_at_ms,
        "stored after acquire"
    );

    let extended = backend
        .extend(&lease.lock_id, max_ttl())
        .unwrap()
        .expect("extend of a live lock");
    assert!(extended >= lease.expires_at_ms - CLOCK_SLACK_MS);
    let info = lookup_both(backend, &key, &lease);
    assert_eq!(info.expires_at_ms, extended, "stored after extend");
    assert!(backend.release(&lease.lock_id).unwrap());
}
