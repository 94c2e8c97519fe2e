//! Property tests of the pure functions every backend relies on, and of the in-process backend,
//! with generated hostile input: NUL, `/`, `.`/`..`, `__x__`, RTL marks (U+202E, U+200F),
//! combining marks in both canonical orders, precomposed/decomposed pairs, singletons that NFC
//! rewrites (Ω sign, Å sign) and composition exclusions that NFC *lengthens* (U+0958), emoji,
//! and keys padded to land exactly on the 512/513-byte boundary after NFC.
//!
//! What it proves, for every generated input (a fixed 256 cases per property, deterministic):
//! - nothing panics, and every failure is a typed `LockError` with the documented code
//!   (`InvalidArgument` for keys, lock ids and TTLs; `Internal` for fences);
//! - `normalize_and_validate_key` is `Ok` exactly when the NFC form is 1..=512 bytes, returns
//!   that NFC form, and is idempotent;
//! - `make_storage_key` matches the written algorithm (plain `prefix:key`, else `prefix:` + 22
//!   base64url characters), always fits `limit - reserve` bytes, is deterministic and gives the
//!   same storage key for canonically equivalent keys;
//! - `hash_key` is 24 lowercase hex characters of SHA-256 and NFC-invariant;
//! - `validate_lock_id` accepts exactly 22 characters of `[A-Za-z0-9_-]` and never echoes input;
//! - fences parse exactly from 15 ASCII digits not all zero, round-trip through `value()`,
//!   `Display`, and JSON, and order like their counters;
//! - `ttl_to_ms` and `is_live` agree with exact integer oracles, including at the extremes;
//! - `MemoryBackend`: an accepted key is locked until released, canonically equivalent keys
//!   share one lock, and no lock id other than the holder's releases or extends it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use syncguard::driver::{
    FENCE_MAX, MAX_KEY_LENGTH_BYTES, MAX_TTL_MS, TIME_TOLERANCE_MS, hash_key, is_live,
    make_storage_key, normalize_and_validate_key, ttl_to_ms, validate_lock_id,
};
use syncguard::{
    AcquireOutcome, ErrorCode, Fence, LockBackend, Lookup, ManualClock, MemoryBackend,
};
use unicode_normalization::UnicodeNormalization as _;

const CASES: u32 = 256;

fn nfc(s: &str) -> String {
    s.nfc().collect()
}

/// Pieces hostile keys are built from.
const PIECES: &[&str] = &[
    "\0",
    "/",
    "//",
    ".",
    "..",
    "__",
    "__x__",
    ":",
    "\u{202E}", // RIGHT-TO-LEFT OVERRIDE
    "\u{200F}", // RIGHT-TO-LEFT MARK
    "\u{202C}",
    "e",
    "\u{301}", // combining acute
    "é",
    "q\u{323}\u{307}", // dot below + dot above …
    "q\u{307}\u{323}", // … in the other order: canonically equivalent
    "\u{323}",
    "\u{307}",
    "\u{1100}\u{1161}", // Hangul jamo → 가
    "가",
    "\u{2126}", // OHM SIGN → Ω (3 bytes → 2)
    "\u{212B}", // ANGSTROM SIGN → Å
    "\u{958}",  // composition exclusion: 3 bytes → 6 bytes after NFC
    "🔒",
    "👨\u{200D}👩\u{200D}👧",
    "🇺🇳",
    "\u{FEFF}",
    "\u{FFFD}",
    "%2F",
    "?#",
    "*",
    "'\\\"",
    "\r\n",
    " ",
    "a",
    "0",
];

/// Keys made of hostile pieces and arbitrary characters (often empty, sometimes long).
fn hostile_key() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(PIECES).prop_map(str::to_owned),
        1 => any::<char>().prop_map(String::from),
        1 => "[a-z]{1,40}",
    ];
    prop_oneof![
        8 => proptest::collection::vec(piece, 0..12).prop_map(|parts| parts.concat()),
        1 => any::<String>(),
        // Long keys around the limit, before and after NFC.
        1 => (proptest::sample::select(PIECES), 100usize..300)
            .prop_map(|(piece, n)| piece.repeat(n)),
    ]
}

/// A tail of hostile pieces, to be padded to an exact NFC length.
fn hostile_tail() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(PIECES), 0..8).prop_map(|p| p.concat())
}

/// `Ok` exactly when the NFC form is 1..=512 bytes.
fn check_normalize(key: &str) -> Result<(), TestCaseError> {
    let expected = nfc(key);
    match normalize_and_validate_key(key) {
        Ok(normalized) => {
            prop_assert_eq!(&normalized, &expected);
            prop_assert!((1..=MAX_KEY_LENGTH_BYTES).contains(&normalized.len()));
            prop_assert!(unicode_normalization::is_nfc(&normalized));
            // Idempotent.
            prop_assert_eq!(
                normalize_and_validate_key(&normalized).ok(),
                Some(normalized)
            );
        }
        Err(err) => {
            prop_assert_eq!(err.code(), ErrorCode::InvalidArgument);
            prop_assert!(expected.is_empty() || expected.len() > MAX_KEY_LENGTH_BYTES);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn normalize_accepts_exactly_1_to_512_nfc_bytes(key in hostile_key()) {
        check_normalize(&key)?;
    }

    /// Pads a hostile tail with `-` (a starter that composes with nothing, so
    /// NFC(pad + tail) = pad + NFC(tail)) to land exactly on 511, 512 or 513 bytes after NFC,
    /// whatever the tail's length as typed.
    #[test]
    fn normalize_at_the_exact_byte_boundary(
        tail in hostile_tail(),
        target in prop_oneof![Just(511usize), Just(512), Just(513)],
    ) {
        let tail_nfc = nfc(&tail);
        prop_assume!(tail_nfc.len() <= target);
        let key = format!("{}{tail}", "-".repeat(target - tail_nfc.len()));
        prop_assert_eq!(nfc(&key).len(), target);
        check_normalize(&key)?;
        prop_assert_eq!(normalize_and_validate_key(&key).is_ok(), target <= 512);
    }

    #[test]
    fn make_storage_key_follows_the_algorithm(
        prefix in prop_oneof![Just(String::new()), Just("syncguard".to_owned()),
                              Just("syncguard:".to_owned()), Just(":".to_owned()), hostile_key()],
        key in hostile_key(),
        limit in prop_oneof![0usize..64, 0usize..2000, Just(1500), Just(1000), Just(1700)],
        reserve in prop_oneof![Just(0usize), 0usize..64, 0usize..300],
    ) {
        let result = make_storage_key(&prefix, &key, limit, reserve);
        // Deterministic, and canonically equivalent keys give the same storage key.
        let typed = |r: &syncguard::Result<String>| r.as_ref().map_err(|e| e.code()).cloned();
        let msk = |k: &str| typed(&make_storage_key(&prefix, k, limit, reserve));
        prop_assert_eq!(msk(&key), typed(&result));
        prop_assert_eq!(msk(&nfc(&key)), typed(&result));
        let decomposed: String = key.nfd().collect();
        prop_assert_eq!(msk(&decomposed), typed(&result));

        // The written algorithm, as an oracle.
        let key_nfc = nfc(&key);
        let prefix = prefix.strip_suffix(':').unwrap_or(&prefix);
        let join = |k: &str| if prefix.is_empty() { k.to_owned() } else { format!("{prefix}:{k}") };
        let separator = usize::from(!prefix.is_empty());
        let plain = join(&key_nfc);
        let expected = if key_nfc.is_empty() || prefix.len() + separator + reserve > limit {
            None
        } else if plain.len() + reserve <= limit {
            Some(plain.clone())
        } else {
            let hashed = join(&URL_SAFE_NO_PAD.encode(&Sha256::digest(plain.as_bytes())[..16]));
            (hashed.len() + reserve <= limit).then_some(hashed)
        };
        match result {
            Ok(storage_key) => {
                prop_assert!(storage_key.len() + reserve <= limit);
                if storage_key != plain {
                    // Hashed form: prefix, separator, 22 base64url characters.
                    let hash = &storage_key[prefix.len() + separator..];
                    prop_assert_eq!(hash.len(), 22);
                    prop_assert!(hash.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
                    prop_assert!(storage_key.starts_with(prefix));
                }
                prop_assert_eq!(Some(storage_key), expected);
            }
            Err(err) => {
                prop_assert_eq!(err.code(), ErrorCode::InvalidArgument);
                prop_assert_eq!(expected, None);
            }
        }
    }

    #[test]
    fn hash_key_is_24_hex_and_nfc_invariant(value in hostile_key()) {
        let hash = hash_key(&value);
        prop_assert_eq!(hash.len(), 24);
        prop_assert!(hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        prop_assert_eq!(&hash_key(&nfc(&value)), &hash);
        let decomposed: String = value.nfd().collect();
        prop_assert_eq!(&hash_key(&decomposed), &hash);
        let digest = Sha256::digest(nfc(&value).as_bytes());
        let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        prop_assert_eq!(hash, hex);
    }

    #[test]
    fn validate_lock_id_accepts_exactly_22_base64url(
        id in prop_oneof![
            "[A-Za-z0-9_-]{22}",
            "[A-Za-z0-9_-]{20,24}",
            // A valid id with one character replaced by something hostile.
            ("[A-Za-z0-9_-]{22}", 0usize..22, proptest::sample::select(
                &["+", "/", "=", " ", ".", "\0", "\n", "é", "\u{202E}", "%", "*", "'", "０", "🔒"][..]))
                .prop_map(|(id, at, bad)| format!("{}{bad}{}", &id[..at], &id[at + 1..])),
            any::<String>(),
            hostile_key(),
        ]
    ) {
        let expected = id.len() == 22
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        match validate_lock_id(&id) {
            Ok(()) => prop_assert!(expected),
            Err(err) => {
                prop_assert!(!expected);
                prop_assert_eq!(err.code(), ErrorCode::InvalidArgument);
                if id.chars().count() >= 12 {
                    prop_assert!(!err.to_string().contains(&id), "the error echoes the id");
                }
            }
        }
    }

    #[test]
    fn fence_parses_exactly_15_ascii_digits_not_all_zero(
        s in prop_oneof![
            "[0-9]{15}",
            "[0-9]{13,17}",
            "0{15}",
            "0{14}[0-9]",
            "[0-9]{14}[^0-9]",
            "[+ -][0-9]{14}",
            // Digits that are numeric but not ASCII.
            "[0-9]{12}[٠-٩０-９]{1,3}",
            any::<String>(),
        ]
    ) {
        let expected = s.len() == 15 && s.bytes().all(|b| b.is_ascii_digit()) && s.bytes().any(|b| b != b'0');
        match s.parse::<Fence>() {
            Ok(fence) => {
                prop_assert!(expected);
                prop_assert_eq!(fence.to_string(), s.as_str());
                prop_assert_eq!(fence.to_string(), s.clone());
                prop_assert_eq!(fence.value(), s.parse::<u64>().unwrap());
                let json = serde_json::to_string(&fence).unwrap();
                prop_assert_eq!(&json, &format!("\"{s}\""));
                prop_assert_eq!(serde_json::from_str::<Fence>(&json).unwrap(), fence);
                if fence.value() <= FENCE_MAX {
                    prop_assert_eq!(Fence::from_counter(fence.value()).unwrap(), fence);
                }
            }
            Err(err) => {
                prop_assert!(!expected);
                prop_assert_eq!(err.code(), ErrorCode::Internal);
                let json = serde_json::to_string(&s).unwrap();
                prop_assert!(serde_json::from_str::<Fence>(&json).is_err());
            }
        }
    }

    #[test]
    fn fence_from_counter_round_trips_and_keeps_order(
        a in prop_oneof![1u64..=FENCE_MAX, 1u64..1000, Just(FENCE_MAX), 0u64..=u64::MAX],
        b in prop_oneof![1u64..=FENCE_MAX, 1u64..1000, Just(FENCE_MAX)],
    ) {
        match Fence::from_counter(a) {
            Ok(fa) => {
                prop_assert!((1..=FENCE_MAX).contains(&a));
                prop_assert_eq!(fa.value(), a);
                prop_assert_eq!(fa.to_string().len(), 15);
                prop_assert_eq!(fa.to_string().parse::<Fence>().unwrap(), fa);
                let json = serde_json::to_string(&fa).unwrap();
                prop_assert_eq!(serde_json::from_str::<Fence>(&json).unwrap(), fa);
                let fb = Fence::from_counter(b).unwrap();
                prop_assert_eq!(fa.cmp(&fb), a.cmp(&b));
                prop_assert_eq!(fa.to_string().cmp(&fb.to_string()), a.cmp(&b));
                let jb = serde_json::to_string(&fb).unwrap();
                prop_assert_eq!(json.cmp(&jb), a.cmp(&b), "JSON strings order like counters");
            }
            Err(err) => {
                prop_assert!(a == 0 || a > FENCE_MAX);
                prop_assert_eq!(err.code(), ErrorCode::Internal);
            }
        }
    }

    #[test]
    fn ttl_to_ms_accepts_whole_ms_from_1_to_max(
        secs in prop_oneof![0u64..10, 0u64..=(MAX_TTL_MS as u64 / 1000 + 2), Just(u64::MAX), any::<u64>()],
        nanos in prop_oneof![Just(0u32), (0u32..1000).prop_map(|ms| ms * 1_000_000), 0u32..1_000_000_000],
    ) {
        let ttl = Duration::new(secs, nanos);
        let total_ms = u128::from(secs) * 1000 + u128::from(nanos / 1_000_000);
        let expected = nanos % 1_000_000 == 0 && (1..=MAX_TTL_MS as u128).contains(&total_ms);
        match ttl_to_ms(ttl) {
            Ok(ms) => {
                prop_assert!(expected);
                prop_assert_eq!(ms as u128, total_ms);
            }
            Err(err) => {
                prop_assert!(!expected, "{:?} refused", ttl);
                prop_assert_eq!(err.code(), ErrorCode::InvalidArgument);
            }
        }
    }

    #[test]
    fn is_live_matches_exact_arithmetic(
        expires in prop_oneof![any::<i64>(), -5000i64..5000, Just(i64::MIN), Just(i64::MAX)],
        now in prop_oneof![any::<i64>(), -5000i64..5000, Just(i64::MIN), Just(i64::MAX)],
        tolerance in prop_oneof![Just(TIME_TOLERANCE_MS), 0i64..5000, any::<i64>()],
    ) {
        let threshold = (i128::from(now) - i128::from(tolerance))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX));
        prop_assert_eq!(is_live(expires, now, tolerance), i128::from(expires) > threshold);
        if tolerance == TIME_TOLERANCE_MS && now > i64::MIN + TIME_TOLERANCE_MS {
            // Live exactly while now < expires + 1000.
            prop_assert_eq!(
                is_live(expires, now, tolerance),
                i128::from(now) < i128::from(expires) + 1000
            );
        }
        // Monotone: live now means live at every earlier time.
        if is_live(expires, now, tolerance) && now > i64::MIN {
            prop_assert!(is_live(expires, now - 1, tolerance));
        }
    }

    #[test]
    fn memory_backend_with_hostile_keys(
        keys in proptest::collection::vec(hostile_key(), 1..8),
        strangers in proptest::collection::vec("[A-Za-z0-9_-]{22}", 1..4),
    ) {
        let clock = ManualClock::new(1_700_000_000_000);
        let backend = MemoryBackend::with_clock(clock.clone());
        let ttl = Duration::from_secs(30);
        // NFC key → (lock id, expiry) of its holder.
        let mut held: BTreeMap<String, (String, i64)> = BTreeMap::new();
        for key in &keys {
            let valid = normalize_and_validate_key(key);
            let outcome = backend.acquire(key, ttl);
            let Ok(normalized) = valid else {
                prop_assert_eq!(outcome.unwrap_err().code(), ErrorCode::InvalidArgument);
                prop_assert_eq!(backend.is_locked(key).unwrap_err().code(), ErrorCode::InvalidArgument);
                prop_assert_eq!(
                    backend.lookup(Lookup::Key(key)).unwrap_err().code(),
                    ErrorCode::InvalidArgument
                );
                continue;
            };
            match outcome.unwrap() {
                AcquireOutcome::Acquired(lease) => {
                    prop_assert!(!held.contains_key(&normalized), "{:?} acquired twice", key);
                    held.insert(normalized.clone(), (lease.lock_id, lease.expires_at_ms));
                }
                AcquireOutcome::Locked => {
                    prop_assert!(held.contains_key(&normalized), "{:?} locked by nobody", key);
                }
            }
            prop_assert!(backend.is_locked(key).unwrap());
            let decomposed: String = key.nfd().collect();
            prop_assert!(backend.is_locked(&decomposed).unwrap());
            let info = backend.lookup(Lookup::Key(key)).unwrap().expect("held");
            prop_assert_eq!(&info.key_hash, &hash_key(&normalized));
            prop_assert_eq!(&info.lock_id_hash, &hash_key(&held[&normalized].0));
        }

        let check_all = |held: &BTreeMap<String, (String, i64)>| -> Result<(), TestCaseError> {
            for (key, (lock_id, expires)) in held {
                prop_assert!(backend.is_locked(key).unwrap());
                let info = backend.lookup(Lookup::LockId(lock_id)).unwrap().expect("still held");
                prop_assert_eq!(info.expires_at_ms, *expires);
                prop_assert_eq!(&info.key_hash, &hash_key(key));
            }
            Ok(())
        };

        // Strangers' ids (valid shape, unknown) touch nothing.
        let ids: HashMap<&str, &str> =
            held.iter().map(|(k, (id, _))| (id.as_str(), k.as_str())).collect();
        for stranger in &strangers {
            prop_assume!(!ids.contains_key(stranger.as_str()));
            prop_assert!(!backend.release(stranger).unwrap());
            prop_assert_eq!(backend.extend(stranger, ttl).unwrap(), None);
            prop_assert_eq!(
                crate::support::release_outcome(&backend, stranger).unwrap(),
                syncguard::driver::Outcome::NotFound
            );
            prop_assert_eq!(backend.lookup(Lookup::LockId(stranger)).unwrap(), None);
        }
        check_all(&held)?;

        // Each id extends only its own lock …
        clock.advance(Duration::from_millis(7));
        let keys_held: Vec<String> = held.keys().cloned().collect();
        for key in &keys_held {
            let (lock_id, _) = held[key].clone();
            let new_expiry = backend.extend(&lock_id, Duration::from_secs(60)).unwrap();
            prop_assert!(new_expiry.is_some());
            held.get_mut(key).unwrap().1 = new_expiry.unwrap();
            check_all(&held)?;
        }
        // … and releases only its own lock.
        for key in &keys_held {
            let (lock_id, _) = held.remove(key).unwrap();
            prop_assert!(backend.release(&lock_id).unwrap());
            prop_assert!(!backend.is_locked(key).unwrap());
            prop_assert!(!backend.release(&lock_id).unwrap(), "released twice");
            prop_assert_eq!(backend.extend(&lock_id, ttl).unwrap(), None);
            check_all(&held)?;
        }
    }
}

/// Limits and reserves at the edges of `usize` give a typed answer, never an overflow panic.
#[test]
fn make_storage_key_with_extreme_limits_does_not_panic() {
    let mut failures = Vec::new();
    for (limit, reserve) in [
        (0, 0),
        (usize::MAX, 0),
        (0, usize::MAX),
        (10, usize::MAX),
        (10, usize::MAX - 5),
        (usize::MAX, usize::MAX),
        (usize::MAX, usize::MAX - 1),
    ] {
        for (prefix, key) in [("p", "k"), ("", "k"), ("p", &*"x".repeat(600))] {
            let outcome =
                std::panic::catch_unwind(|| make_storage_key(prefix, key, limit, reserve));
            match outcome {
                Err(_) => failures.push(format!(
                    "({prefix:?}, {} bytes, {limit}, {reserve}) panicked",
                    key.len()
                )),
                Ok(Ok(storage_key)) if storage_key.len() > limit.saturating_sub(reserve) => {
                    failures.push(format!(
                        "({prefix:?}, {} bytes, {limit}, {reserve}) gave {} bytes",
                        key.len(),
                        storage_key.len()
                    ))
                }
                Ok(Ok(_)) => {}
                Ok(Err(err)) => assert_eq!(err.code(), ErrorCode::InvalidArgument),
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The same edges, where the sums cannot overflow: typed answers within the limit.
#[test]
fn make_storage_key_with_large_but_safe_limits() {
    for (limit, reserve) in [
        (0, 0),
        (usize::MAX / 2, 0),
        (0, usize::MAX / 4),
        (10, 1 << 40),
    ] {
        for (prefix, key) in [("p", "k"), ("", "k"), ("p", &*"x".repeat(600)), ("", "")] {
            match make_storage_key(prefix, key, limit, reserve) {
                Ok(storage_key) => assert!(storage_key.len() + reserve <= limit),
                Err(err) => assert_eq!(err.code(), ErrorCode::InvalidArgument),
            }
        }
    }
}
