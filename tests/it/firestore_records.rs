//! Stored documents that are not SyncGuard's, on the emulator: one rule for every operation.
//! A lock document that is not a SyncGuard lock record (a field missing or of another type, a
//! malformed fence, an expiry no clock reaches, another program's shape) is an `Internal`
//! error naming the key — for acquire, is_locked, lookup by key and by lock id, release and
//! extend by lock id and by a guard's lease — never "locked" and never "absent"; nothing is
//! written over it. Extra fields are tolerated. A fence counter that is not a SyncGuard counter
//! (negative, not digits, past the limit) stops acquire with `Internal` before anything is
//! written.

use serde_json::{Value, json};
use syncguard::Clock as _;
use syncguard::driver::{
    Acquisition, Driver as _, DriverExt as _, Key, LeaseRef, LockId, Request, Ttl, Version,
    generate_lock_id,
};
use syncguard::firestore::FirestoreBackend;
use syncguard::{ErrorCode, LeaseKind, LockBackend, Lookup};

use crate::support::{
    TTL, assert_honours_a_foreign_lock, raw_document, shared_firestore_backend, unique,
    write_document,
};

/// The fields of a live SyncGuard lock on `key` held by `lock_id`, as the TypeScript
/// SyncGuard writes them.
fn good_fields(key: &str, lock_id: &str) -> serde_json::Map<String, Value> {
    let now = syncguard::SystemClock.now_ms();
    let Value::Object(fields) = json!({
        "lockId": { "stringValue": lock_id },
        "expiresAtMs": { "integerValue": (now + 30_000).to_string() },
        "acquiredAtMs": { "integerValue": now.to_string() },
        "key": { "stringValue": key },
        "fence": { "stringValue": "000000000000007" },
    }) else {
        unreachable!("an object literal")
    };
    fields
}

/// One way a lock document is not a SyncGuard lock record: a change to the good fields.
struct Malformed {
    name: &'static str,
    edit: fn(&mut serde_json::Map<String, Value>),
}

fn malformed_records() -> Vec<Malformed> {
    vec![
        Malformed {
            name: "fence missing",
            edit: |f| drop(f.remove("fence")),
        },
        Malformed {
            name: "fence short",
            edit: |f| drop(f.insert("fence".into(), json!({ "stringValue": "7" }))),
        },
        Malformed {
            name: "fence negative",
            edit: |f| drop(f.insert("fence".into(), json!({ "stringValue": "-00000000000004" }))),
        },
        Malformed {
            name: "fence zero",
            edit: |f| drop(f.insert("fence".into(), json!({ "stringValue": "000000000000000" }))),
        },
        Malformed {
            name: "fence as a number",
            edit: |f| drop(f.insert("fence".into(), json!({ "integerValue": "7" }))),
        },
        Malformed {
            name: "expiresAtMs a huge double",
            edit: |f| drop(f.insert("expiresAtMs".into(), json!({ "doubleValue": 1e300 }))),
        },
        Malformed {
            name: "expiresAtMs Infinity",
            edit: |f| drop(f.insert("expiresAtMs".into(), json!({ "doubleValue": "Infinity" }))),
        },
        Malformed {
            name: "expiresAtMs a string",
            edit: |f| drop(f.insert("expiresAtMs".into(), json!({ "stringValue": "1e300" }))),
        },
        Malformed {
            name: "expiresAtMs beyond any clock",
            edit: |f| {
                drop(f.insert(
                    "expiresAtMs".into(),
                    json!({ "integerValue": i64::MAX.to_string() }),
                ))
            },
        },
        Malformed {
            name: "expiresAtMs negative",
            edit: |f| drop(f.insert("expiresAtMs".into(), json!({ "integerValue": "-1" }))),
        },
        Malformed {
            name: "acquiredAtMs missing",
            edit: |f| drop(f.remove("acquiredAtMs")),
        },
        Malformed {
            name: "key missing",
            edit: |f| drop(f.remove("key")),
        },
        Malformed {
            name: "lockId missing",
            edit: |f| drop(f.remove("lockId")),
        },
        Malformed {
            name: "lockId empty",
            edit: |f| drop(f.insert("lockId".into(), json!({ "stringValue": "" }))),
        },
        Malformed {
            name: "a foreign shape",
            edit: |f| {
                f.clear();
                f.insert("owner".into(), json!({ "stringValue": "cron@host" }));
                f.insert("until".into(), json!({ "integerValue": "5" }));
            },
        },
    ]
}

/// `result` is the `Internal` error naming `key`, for `what` on the record `name`.
#[track_caller]
fn assert_not_a_record<T: std::fmt::Debug>(
    result: syncguard::Result<T>,
    key: &str,
    name: &str,
    what: &str,
) {
    match result {
        Err(err) => {
            assert_eq!(err.code(), ErrorCode::Internal, "{name}: {what}: {err}");
            assert_eq!(
                err.key(),
                Some(key),
                "{name}: {what} names the key: {err:?}"
            );
        }
        Ok(answer) => panic!("{name}: {what} answered {answer:?} for a record that is not one"),
    }
}

/// The lock id of a stored record, when it carries a string one.
fn stored_lock_id(fields: &serde_json::Map<String, Value>) -> Option<&str> {
    fields.get("lockId")?.get("stringValue")?.as_str()
}

/// Every operation on every malformed record: `Internal`, naming the key (a listing, when the
/// record's `key` is a string under its prefix: it finds documents by that field), and the
/// record is left as it was.
#[test]
fn records_that_are_not_syncguard_locks_are_internal_errors_everywhere() {
    let backend = shared_firestore_backend();
    for shape in malformed_records() {
        let key = unique("malformed");
        let lock_id = generate_lock_id();
        let mut fields = good_fields(&key, &lock_id);
        (shape.edit)(&mut fields);
        let fields = Value::Object(fields);
        write_document("locks", &key, fields.clone());
        let name = shape.name;

        assert_not_a_record(backend.acquire(&key, TTL), &key, name, "acquire");
        assert_not_a_record(backend.is_locked(&key), &key, name, "is_locked");
        assert_not_a_record(
            backend.lookup(Lookup::Key(&key)),
            &key,
            name,
            "lookup by key",
        );
        if let Some(id) = stored_lock_id(fields.as_object().unwrap()).filter(|id| !id.is_empty()) {
            assert_not_a_record(
                backend.lookup(Lookup::LockId(id)),
                &key,
                name,
                "lookup by lock id",
            );
            assert_not_a_record(backend.release(id), &key, name, "release");
            assert_not_a_record(backend.extend(id, TTL), &key, name, "extend");
        }
        // A listing finds documents by their `key` string: those it finds, it reports.
        match fields["key"].get("stringValue").and_then(Value::as_str) {
            Some(stored) if stored.starts_with(key.as_str()) => {
                assert_not_a_record(
                    backend.list(&key, LeaseKind::Lock, 10),
                    stored,
                    name,
                    "list",
                );
            }
            _ => {
                let listed = backend.list(&key, LeaseKind::Lock, 10).unwrap();
                assert!(listed.locks.is_empty(), "{name}: list: {listed:?}");
            }
        }
        let stored = raw_document("locks", &key).expect("the record is left in place");
        assert_eq!(
            stored["fields"], fields,
            "{name}: the record is left as it was"
        );
    }
}

/// A guard's lease whose document was overwritten with something that is not a SyncGuard
/// record (its version is stale, so it is found by lock id): renewing and releasing it are
/// `Internal` errors naming the key, as the same calls by lock id.
#[test]
fn a_guards_lease_on_a_record_turned_malformed_is_an_internal_error() {
    let backend = shared_firestore_backend();
    let ttl = Ttl::new(TTL).unwrap();
    for shape in malformed_records() {
        let name = shape.name;
        let key = Key::new(&unique("malformed-guard")).unwrap();
        let (lock_id, version): (LockId, Option<Version>) =
            match backend.acquire_one(&Request::one(&key, ttl)).unwrap() {
                Acquisition::Acquired { lease, version } => {
                    (LockId::new(&lease.lock_id).unwrap(), version)
                }
                Acquisition::Locked => panic!("a fresh key is free"),
            };
        assert!(version.is_some(), "an acquisition carries its version");
        let mut fields = good_fields(key.as_str(), lock_id.as_str());
        (shape.edit)(&mut fields);
        if stored_lock_id(&fields) != Some(lock_id.as_str()) {
            continue; // Found by nobody's lock id: that lease's lock is gone, not malformed.
        }
        let doc_id = backend.lock_document_id(key.as_str()).unwrap();
        write_document("locks", &doc_id, Value::Object(fields));
        let lease = LeaseRef::new(&lock_id)
            .with_key(&key)
            .with_version(version.as_ref());
        assert_not_a_record(
            backend.extend_lease(lease, ttl),
            key.as_str(),
            name,
            "a guard's renewal",
        );
        // A batch: beside a good lease, which is renewed.
        let other = Key::new(&unique("malformed-guard-beside")).unwrap();
        let Acquisition::Acquired {
            lease: good,
            version: good_version,
        } = backend.acquire_one(&Request::one(&other, ttl)).unwrap()
        else {
            panic!("a fresh key is free");
        };
        let good_id = LockId::new(&good.lock_id).unwrap();
        let beside = LeaseRef::new(&good_id)
            .with_key(&other)
            .with_version(good_version.as_ref());
        let mut renewed = backend.extend_leases(&[(lease, ttl), (beside, ttl)]);
        assert_eq!(renewed.len(), 2, "{name}: one answer per lease");
        assert!(
            matches!(renewed.pop(), Some(Ok(outcome)) if outcome.is_applied()),
            "{name}: the good lease beside it is renewed"
        );
        assert_not_a_record(
            renewed.pop().expect("one answer"),
            key.as_str(),
            name,
            "a batch renewal",
        );
        assert!(backend.release(&good.lock_id).unwrap());
        assert_not_a_record(
            backend.release_lease(lease),
            key.as_str(),
            name,
            "a guard's release",
        );
    }
}

/// A SyncGuard record with fields of its own added (a later version's, or another tool's) is
/// still a SyncGuard record.
#[test]
fn extra_fields_are_tolerated() {
    let backend = shared_firestore_backend();
    let key = unique("extra-fields");
    let lock_id = generate_lock_id();
    let mut fields = good_fields(&key, &lock_id);
    let expires_at_ms: i64 = fields["expiresAtMs"]["integerValue"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    fields.insert(
        "holder".into(),
        json!({ "mapValue": { "fields": { "host": { "stringValue": "cron-1" } } } }),
    );
    fields.insert("note".into(), json!({ "nullValue": null }));
    write_document("locks", &key, Value::Object(fields));
    write_document(
        "fence_counters",
        &format!("fence:{key}"),
        json!({ "fence": { "stringValue": "000000000000007" }, "keyDebug": { "stringValue": key } }),
    );
    assert_honours_a_foreign_lock(&backend, &key, &lock_id, expires_at_ms);
}

/// A fence counter that is not a SyncGuard counter stops acquire with `Internal` naming the
/// key, before anything is written: no lock document, the counter as it was.
#[test]
fn a_corrupt_fence_counter_writes_no_lock() {
    let backend: FirestoreBackend = shared_firestore_backend();
    let counters = [
        json!({ "stringValue": "-5" }),
        json!({ "stringValue": "-00000000000005" }),
        json!({ "integerValue": "-5" }),
        json!({ "integerValue": "5" }),
        json!({ "stringValue": "five" }),
        json!({ "stringValue": "00000000000000x" }),
        json!({ "stringValue": "" }),
        json!({ "stringValue": "0000000000000005" }),
        json!({ "stringValue": "900000000000000" }),
        json!({ "stringValue": "999999999999999" }),
        json!({ "doubleValue": 5.0 }),
    ];
    for counter in counters {
        let key = unique("corrupt-counter");
        let fence_id = backend.fence_document_id(&key).unwrap();
        let fields = json!({ "fence": counter, "keyDebug": { "stringValue": key } });
        write_document("fence_counters", &fence_id, fields.clone());
        assert_not_a_record(
            backend.acquire(&key, TTL),
            &key,
            &counter.to_string(),
            "acquire",
        );
        let lock_id = backend.lock_document_id(&key).unwrap();
        assert_eq!(
            raw_document("locks", &lock_id),
            None,
            "{counter}: no lock is written"
        );
        assert_eq!(
            raw_document("fence_counters", &fence_id).expect("the counter")["fields"],
            fields,
            "{counter}: the counter is left as it was"
        );
        assert!(!backend.is_locked(&key).unwrap(), "{counter}");
    }
}
