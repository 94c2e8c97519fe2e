//! DESIGN §4.1: `make_storage_key`, `hash_key` and the keys each backend derives agree with
//! the reference vectors in `tests/data/storage_keys.json` (computed with the TypeScript
//! SyncGuard's algorithm). Every vector is checked; a vector that is skipped, or a section
//! this test does not know, fails the test.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use syncguard::driver::{hash_key, make_storage_key};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/storage_keys.json");

/// Redis: limit 1000, reserve 26, default prefix `syncguard` (DESIGN §4.2).
const REDIS: (&str, usize, usize) = ("syncguard", 1000, 26);
/// PostgreSQL: limit 1700, reserve 0, no prefix (DESIGN §4.3).
const POSTGRES: (&str, usize, usize) = ("", 1700, 0);

fn load() -> Map<String, Value> {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("{VECTORS}: {e}"));
    match serde_json::from_str(&text).expect("vectors are JSON") {
        Value::Object(map) => map,
        other => panic!("vectors must be a JSON object, got {other}"),
    }
}

fn field<'a>(entry: &'a Value, name: &str) -> &'a Value {
    entry
        .get(name)
        .unwrap_or_else(|| panic!("vector {entry} lacks {name:?}"))
}

fn string<'a>(entry: &'a Value, name: &str) -> &'a str {
    field(entry, name)
        .as_str()
        .unwrap_or_else(|| panic!("vector field {name:?} must be a string in {entry}"))
}

fn number(entry: &Value, name: &str) -> usize {
    let n = field(entry, name)
        .as_u64()
        .unwrap_or_else(|| panic!("vector field {name:?} must be a number in {entry}"));
    usize::try_from(n).expect("fits usize")
}

fn array<'a>(vectors: &'a Map<String, Value>, name: &str) -> &'a Vec<Value> {
    vectors
        .get(name)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("section {name:?} must be an array"))
}

fn assert_fields(entry: &Value, expected: &[&str]) {
    let got: BTreeSet<&str> = entry
        .as_object()
        .unwrap_or_else(|| panic!("vector must be an object: {entry}"))
        .keys()
        .map(String::as_str)
        .collect();
    let want: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(got, want, "unexpected fields in vector {entry}");
}

fn msk(params: (&str, usize, usize), key: &str) -> String {
    let (prefix, limit, reserve) = params;
    make_storage_key(prefix, key, limit, reserve).unwrap_or_else(|e| {
        panic!("make_storage_key({prefix:?}, {key:?}, {limit}, {reserve}): {e}")
    })
}

/// Short form of a possibly huge key for failure messages.
fn show(s: &str) -> String {
    if s.chars().count() <= 60 {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(40).collect();
        format!("{head:?}… ({} bytes)", s.len())
    }
}

#[test]
fn every_vector_matches() {
    let vectors = load();
    let sections: BTreeSet<&str> = vectors.keys().map(String::as_str).collect();
    assert_eq!(
        sections,
        BTreeSet::from(["about", "make_storage_key", "hash_key", "derived_keys"]),
        "a section this test does not check would be silently skipped"
    );

    let mut total = 0;
    let mut checked = 0;
    let mut mismatches: Vec<String> = Vec::new();

    // make_storage_key(prefix, key, limit, reserve) → string | {"error": code}
    let entries = array(&vectors, "make_storage_key");
    assert!(!entries.is_empty());
    total += entries.len();
    for entry in entries {
        assert_fields(entry, &["prefix", "key", "limit", "reserve", "expected"]);
        let (prefix, key) = (string(entry, "prefix"), string(entry, "key"));
        let (limit, reserve) = (number(entry, "limit"), number(entry, "reserve"));
        let got = make_storage_key(prefix, key, limit, reserve);
        let call = format!(
            "make_storage_key({prefix:?}, {}, {limit}, {reserve})",
            show(key)
        );
        match field(entry, "expected") {
            Value::String(expected) => match got {
                Ok(actual) if &actual == expected => {}
                Ok(actual) => mismatches.push(format!(
                    "{call} = {}, expected {}",
                    show(&actual),
                    show(expected)
                )),
                Err(err) => mismatches.push(format!("{call} failed with {err:?}")),
            },
            Value::Object(error) => {
                assert_fields(&Value::Object(error.clone()), &["error"]);
                let code = error["error"].as_str().expect("error code is a string");
                match got {
                    Err(err) if err.code().as_str() == code => {}
                    Err(err) => {
                        mismatches.push(format!("{call} failed with {err:?}, expected {code}"))
                    }
                    Ok(actual) => mismatches
                        .push(format!("{call} = {}, expected error {code}", show(&actual))),
                }
            }
            other => panic!("unknown expectation {other} in {entry}"),
        }
        checked += 1;
    }

    // hash_key(value) → 24 lowercase hex characters
    let entries = array(&vectors, "hash_key");
    assert!(!entries.is_empty());
    total += entries.len();
    for entry in entries {
        assert_fields(entry, &["value", "expected"]);
        let value = string(entry, "value");
        let expected = string(entry, "expected");
        let actual = hash_key(value);
        if actual != expected {
            mismatches.push(format!(
                "hash_key({}) = {actual}, expected {expected}",
                show(value)
            ));
        }
        checked += 1;
    }

    // derived_keys: the storage keys each backend computes for a user key.
    let entries = array(&vectors, "derived_keys");
    assert!(!entries.is_empty());
    total += entries.len();
    for entry in entries {
        assert_fields(entry, &["key", "redis", "postgres", "firestore"]);
        let key = string(entry, "key");
        let redis = field(entry, "redis");
        let postgres = field(entry, "postgres");
        let firestore = field(entry, "firestore");
        assert_fields(redis, &["lock_key", "fence_key"]);
        assert_fields(postgres, &["key", "fence_key"]);
        // Firestore's document ids are checked against the backend's own functions, below.
        assert_fields(firestore, &["lock_doc_id", "fence_doc_id"]);

        let redis_lock = msk(REDIS, key);
        let redis_fence = msk(REDIS, &format!("fence:{redis_lock}"));
        let pg_key = msk(POSTGRES, key);
        let pg_fence = msk(POSTGRES, &format!("fence:{pg_key}"));
        for (what, actual, expected) in [
            ("redis.lock_key", &redis_lock, string(redis, "lock_key")),
            ("redis.fence_key", &redis_fence, string(redis, "fence_key")),
            ("postgres.key", &pg_key, string(postgres, "key")),
            (
                "postgres.fence_key",
                &pg_fence,
                string(postgres, "fence_key"),
            ),
        ] {
            if actual != expected {
                mismatches.push(format!(
                    "derived {what} for {} = {}, expected {}",
                    show(key),
                    show(actual),
                    show(expected)
                ));
            }
        }
        checked += 1;
    }

    assert!(
        mismatches.is_empty(),
        "{} of {total} vectors disagree:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert_eq!(checked, total, "every vector in the file must be checked");
    assert!(
        total >= 80,
        "expected the full vector file, found only {total} vectors"
    );
}

/// The hash-truncation branch of §4.1 step 4 is exercised by the vectors (guards against a
/// vector file that only covers short keys).
#[test]
fn vectors_cover_truncation_and_errors() {
    let vectors = load();
    let entries = array(&vectors, "make_storage_key");
    let truncated = entries
        .iter()
        .filter(|e| {
            // A hashed key is `prefix:` plus 22 characters, far shorter than the long input.
            let (prefix, key) = (string(e, "prefix"), string(e, "key"));
            e["expected"]
                .as_str()
                .is_some_and(|expected| key.len() > 100 && expected.len() <= prefix.len() + 1 + 22)
        })
        .count();
    let errors = entries.iter().filter(|e| e["expected"].is_object()).count();
    assert!(truncated > 0, "no vector takes the hash-truncation branch");
    assert!(errors > 0, "no vector expects an error");
}

/// DESIGN §4.4: the Firestore document ids of `derived_keys` are what the backend itself
/// computes (`lock_document_id`, `fence_document_id`), after the Firestore-safety rule that
/// hashes an id Firestore rejects (`a/b/c`): not only the `make_storage_key` composition.
#[cfg(feature = "firestore")]
#[test]
fn firestore_document_ids_match_the_vectors() {
    // Building the backend does no I/O: the emulator host is only where requests would go.
    let backend = syncguard::firestore::FirestoreBackend::builder()
        .project("vectors")
        .emulator_host("127.0.0.1:9")
        .build()
        .expect("a Firestore backend for computing ids");
    let vectors = load();
    let entries = array(&vectors, "derived_keys");
    let mut mismatches = Vec::new();
    let mut hashed = 0;
    for entry in entries {
        let key = string(entry, "key");
        let firestore = field(entry, "firestore");
        let (lock_doc, fence_doc) = (
            backend.lock_document_id(key).expect("a valid key"),
            backend.fence_document_id(key).expect("a valid key"),
        );
        for (what, actual, expected) in [
            ("lock_doc_id", &lock_doc, string(firestore, "lock_doc_id")),
            (
                "fence_doc_id",
                &fence_doc,
                string(firestore, "fence_doc_id"),
            ),
        ] {
            if actual != expected {
                mismatches.push(format!(
                    "firestore.{what} for {} = {}, expected {}",
                    show(key),
                    show(actual),
                    show(expected)
                ));
            }
        }
        if lock_doc != make_storage_key("", key, 1500, 0).expect("a valid key") {
            hashed += 1;
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} Firestore ids disagree:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(
        hashed > 0,
        "no vector takes the Firestore-safety branch (an id Firestore rejects)"
    );
}
