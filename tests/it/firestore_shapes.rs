//! Firestore answers that are not what they should be — an `{"error": …}` element inside a
//! `200` stream, a body that is not JSON, JSON of the wrong shape — put into real traffic by a
//! forwarding stub in front of the emulator (the emulator never gives them). Every one is a
//! typed error with the code its status implies, never "no lock"; nothing the fault touched
//! is lost: the owner still holds its lock and can release it. A guard whose renewals meet
//! such answers keeps its lease, and its release still sends its write.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use syncguard::firestore::FirestoreBackend;
use syncguard::testing::support::wait_until;
use syncguard::{ErrorCode, Heartbeat, LockBackend, LockOptions, Locker, Lookup, get_by_key_raw};

use crate::support::{FaultyFirestore, Injected, TTL, lease, shared_firestore_backend, unique};

/// A timestamp as Firestore writes them, for answers made up here.
const SOME_TIME: &str = "2026-01-01T00:00:00.000000Z";

/// What a test does to the lock `owner` holds on `key`, through the stub. Each op sends its
/// requests in a known order (see [`Op::verbs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// acquire on the held key: `batchGet` (visibly held: no commit).
    AcquireHeld,
    /// acquire on a free key: `batchGet`, `commit`.
    AcquireFree,
    /// release by lock id: `runQuery`, `commit`.
    Release,
    /// extend by lock id: `runQuery`, `commit`.
    Extend,
    /// lookup by key: `batchGet`.
    LookupKey,
    /// lookup by lock id: `runQuery`.
    LookupId,
    /// is_locked: `batchGet`.
    IsLocked,
}

const OPS: [Op; 7] = [
    Op::AcquireHeld,
    Op::AcquireFree,
    Op::Release,
    Op::Extend,
    Op::LookupKey,
    Op::LookupId,
    Op::IsLocked,
];

impl Op {
    /// The calls it makes, in order, when all goes well.
    fn verbs(self) -> &'static [&'static str] {
        match self {
            Op::AcquireHeld | Op::LookupKey | Op::IsLocked => &["batchGet"],
            Op::AcquireFree => &["batchGet", "commit"],
            Op::Release | Op::Extend => &["runQuery", "commit"],
            Op::LookupId => &["runQuery"],
        }
    }

    /// Whether its first call reads the owner's lock document (so a shape that rewrites the
    /// documents in an answer has one to rewrite).
    fn reads_the_lock(self) -> bool {
        self != Op::AcquireFree
    }

    /// Runs it; `Ok` carries what it answered, for the failure message.
    fn run(
        self,
        backend: &FirestoreBackend,
        key: &str,
        free_key: &str,
        lock_id: &str,
    ) -> syncguard::Result<String> {
        Ok(match self {
            Op::AcquireHeld => format!("{:?}", backend.acquire(key, TTL)?),
            Op::AcquireFree => format!("{:?}", backend.acquire(free_key, TTL)?),
            Op::Release => format!("{:?}", backend.release(lock_id)?),
            Op::Extend => format!("{:?}", backend.extend(lock_id, TTL)?),
            Op::LookupKey => format!("{:?}", backend.lookup(Lookup::Key(key))?),
            Op::LookupId => format!("{:?}", backend.lookup(Lookup::LockId(lock_id))?),
            Op::IsLocked => format!("{:?}", backend.is_locked(key)?),
        })
    }
}

/// An answer to inject for one call, and the code the caller must get.
struct Shape {
    name: &'static str,
    /// The call whose answer it replaces.
    verb: &'static str,
    answer: Injected,
    code: ErrorCode,
    /// It rewrites the documents of a read: only ops that read the owner's lock apply.
    rewrites_documents: bool,
    /// Ops it does not apply to (the answer would be right for them).
    except: &'static [Op],
}

fn error_element(code: i64, status: &str) -> Value {
    json!({ "error": { "code": code, "status": status, "message": "injected" } })
}

/// A document of an answer, changed in place.
type Edit = fn(&mut serde_json::Map<String, Value>);

/// A read's answer with `edit` applied to each of its documents (`found` or `document`).
fn edit_documents(mut answer: Value, edit: Edit) -> Value {
    for item in answer.as_array_mut().expect("a read answers an array") {
        for key in ["found", "document"] {
            if let Some(Value::Object(document)) = item.get_mut(key) {
                edit(document);
            }
        }
    }
    answer
}

/// The answers of the wrong kind a read (`batchGet` or `runQuery`) may get.
fn read_shapes(verb: &'static str) -> Vec<Shape> {
    let shape = |name, answer, code| Shape {
        name,
        verb,
        answer,
        code,
        rewrites_documents: false,
        except: &[],
    };
    let rewrite = |name, edit: Edit, code| Shape {
        name,
        verb,
        answer: Injected::rewrite(move |answer| edit_documents(answer, edit)),
        code,
        rewrites_documents: true,
        except: &[],
    };
    let append = |name, status: &'static str, code| Shape {
        name,
        verb,
        answer: Injected::rewrite(move |mut answer| {
            let items = answer.as_array_mut().expect("a read answers an array");
            items.push(error_element(0, status));
            answer
        }),
        code,
        rewrites_documents: true,
        except: &[],
    };
    let mut shapes = vec![
        shape(
            "an UNAVAILABLE error element",
            Injected::replace(200, json!([error_element(14, "UNAVAILABLE")]).to_string()),
            ErrorCode::ServiceUnavailable,
        ),
        shape(
            "an INTERNAL error element",
            Injected::replace(200, json!([error_element(13, "INTERNAL")]).to_string()),
            ErrorCode::ServiceUnavailable,
        ),
        shape(
            "a PERMISSION_DENIED error element",
            Injected::replace(
                200,
                json!([error_element(7, "PERMISSION_DENIED")]).to_string(),
            ),
            ErrorCode::AuthFailed,
        ),
        shape(
            "an INVALID_ARGUMENT error element",
            Injected::replace(
                200,
                json!([error_element(3, "INVALID_ARGUMENT")]).to_string(),
            ),
            ErrorCode::InvalidArgument,
        ),
        shape(
            "an error element with a numeric code only",
            Injected::replace(200, r#"[{"error":{"code":14,"message":"x"}}]"#),
            ErrorCode::ServiceUnavailable,
        ),
        append(
            "an UNAVAILABLE error element after the documents",
            "UNAVAILABLE",
            ErrorCode::ServiceUnavailable,
        ),
        append(
            "a DEADLINE_EXCEEDED error element after the documents",
            "DEADLINE_EXCEEDED",
            ErrorCode::NetworkTimeout,
        ),
        shape(
            "a body that is not JSON",
            Injected::replace(200, "not json"),
            ErrorCode::ServiceUnavailable,
        ),
        shape(
            "an empty body",
            Injected::replace(200, ""),
            ErrorCode::ServiceUnavailable,
        ),
        shape(
            "an answer cut short",
            Injected::rewrite_body(|answer| {
                let text = answer.to_string();
                text.as_bytes()[..text.len() / 2].to_vec()
            }),
            ErrorCode::ServiceUnavailable,
        ),
        shape(
            "an object where an array is expected",
            Injected::replace(200, "{}"),
            ErrorCode::ServiceUnavailable,
        ),
        shape(
            "an empty array",
            Injected::replace(200, "[]"),
            ErrorCode::ServiceUnavailable,
        ),
        shape(
            "an element that is neither",
            Injected::replace(200, r#"[{"transaction":"x"}]"#),
            ErrorCode::ServiceUnavailable,
        ),
        rewrite(
            "a document without a name",
            |document| {
                document.remove("name");
            },
            ErrorCode::ServiceUnavailable,
        ),
        rewrite(
            "a document without an updateTime",
            |document| {
                document.remove("updateTime");
            },
            ErrorCode::ServiceUnavailable,
        ),
        rewrite(
            "a document whose fields are not an object",
            |document| {
                document.insert("fields".to_owned(), json!([]));
            },
            ErrorCode::ServiceUnavailable,
        ),
        // Reads as stored data of the wrong types, as a foreign document would: `Internal`,
        // like such data in every backend (reading again finds the same).
        rewrite(
            "fields of the wrong types",
            |document| {
                let fields = document["fields"].as_object_mut().expect("fields");
                for value in fields.values_mut() {
                    *value = json!({ "booleanValue": true });
                }
            },
            ErrorCode::Internal,
        ),
    ];
    match verb {
        "batchGet" => shapes.extend([
            shape(
                "an element neither found nor missing",
                Injected::replace(200, json!([{ "readTime": SOME_TIME }]).to_string()),
                ErrorCode::ServiceUnavailable,
            ),
            // acquire asks for the lock and its fence counter: the counter's answer alone
            // does not say the lock is missing.
            Shape {
                name: "the lock document left out",
                verb,
                answer: Injected::rewrite(|mut answer| {
                    let items = answer.as_array_mut().expect("batchGet answers an array");
                    items.retain(|item| {
                        !item["found"]["name"]
                            .as_str()
                            .is_some_and(|name| name.contains("/locks/"))
                    });
                    answer
                }),
                code: ErrorCode::ServiceUnavailable,
                rewrites_documents: true,
                except: &[],
            },
        ]),
        _ => shapes.push(rewrite(
            "a document that does not hold the lock id asked for",
            |document| {
                document["fields"]["lockId"] = json!({ "stringValue": "another-lock-id-000000" });
            },
            ErrorCode::ServiceUnavailable,
        )),
    }
    shapes
}

/// The answers of the wrong kind a `commit` may get. They replace the answer without
/// forwarding: the write does not happen.
fn commit_shapes() -> Vec<Shape> {
    let shape = |name, body: String, code, except| Shape {
        name,
        verb: "commit",
        answer: Injected::replace(200, body),
        code,
        rewrites_documents: false,
        except,
    };
    vec![
        shape(
            "an UNAVAILABLE error element",
            json!([error_element(14, "UNAVAILABLE")]).to_string(),
            ErrorCode::ServiceUnavailable,
            &[],
        ),
        shape(
            "an error object",
            json!(error_element(7, "PERMISSION_DENIED")).to_string(),
            ErrorCode::AuthFailed,
            &[],
        ),
        shape(
            "a body that is not JSON",
            "not json".to_owned(),
            ErrorCode::ServiceUnavailable,
            &[],
        ),
        shape(
            "an empty body",
            String::new(),
            ErrorCode::ServiceUnavailable,
            &[],
        ),
        shape(
            "an empty object",
            "{}".to_owned(),
            ErrorCode::ServiceUnavailable,
            &[],
        ),
        shape(
            "an array where an object is expected",
            json!([{ "commitTime": SOME_TIME }]).to_string(),
            ErrorCode::ServiceUnavailable,
            &[],
        ),
        shape(
            "no writeResults",
            json!({ "commitTime": SOME_TIME }).to_string(),
            ErrorCode::ServiceUnavailable,
            &[],
        ),
        shape(
            "no commitTime",
            json!({ "writeResults": [{ "updateTime": SOME_TIME }, { "updateTime": SOME_TIME }] })
                .to_string(),
            ErrorCode::ServiceUnavailable,
            &[],
        ),
        shape(
            "too few writeResults",
            json!({ "commitTime": SOME_TIME, "writeResults": [] }).to_string(),
            ErrorCode::ServiceUnavailable,
            &[],
        ),
        // Right for a release (a delete has no new version); wrong for an update.
        shape(
            "an update's result without updateTime",
            json!({ "commitTime": SOME_TIME, "writeResults": [{}] }).to_string(),
            ErrorCode::ServiceUnavailable,
            &[Op::Release],
        ),
    ]
}

/// Runs every op that makes the call `shape` answers, against a lock held through the stub,
/// and checks: the op fails with the shape's code, it met the injected answer, and the lock is
/// still there, the owner's, unchanged, and releasable.
fn check_shapes(shapes: Vec<Shape>) {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let direct = shared_firestore_backend();
    let mut checked = 0;
    for shape in &shapes {
        for op in OPS {
            if !op.verbs().contains(&shape.verb)
                || (shape.rewrites_documents && !op.reads_the_lock())
                || shape.except.contains(&op)
            {
                continue;
            }
            let key = unique("shape");
            let free_key = unique("shape-free");
            let owner = lease(backend.acquire(&key, TTL));
            // Calls to other verbs (the read before a commit) pass through.
            faulty.inject(shape.verb, 1, shape.answer.clone());
            let case = format!("{op:?} meeting {} from {}", shape.name, shape.verb);
            let err = match op.run(&backend, &key, &free_key, &owner.lock_id) {
                Ok(answer) => panic!("{case}: answered {answer} instead of failing"),
                Err(err) => err,
            };
            assert_eq!(err.code(), shape.code, "{case}: {err}");
            assert_eq!(
                faulty.pending(),
                0,
                "{case}: the injected answer was not met"
            );

            // Nothing was lost, nothing changed: the owner's lock as acquired.
            let held = get_by_key_raw(&direct, &key)
                .unwrap()
                .unwrap_or_else(|| panic!("{case}: the lock is gone"));
            assert_eq!(held.lock_id, owner.lock_id, "{case}");
            assert_eq!(held.info.expires_at_ms, owner.expires_at_ms, "{case}");
            assert!(
                !direct.is_locked(&free_key).unwrap(),
                "{case}: a lock was taken"
            );
            assert!(direct.release(&owner.lock_id).unwrap(), "{case}");
            checked += 1;
        }
    }
    assert!(checked >= shapes.len(), "every shape met at least one op");
}

#[test]
fn batch_get_answers_of_the_wrong_kind_are_typed_errors() {
    check_shapes(read_shapes("batchGet"));
}

#[test]
fn run_query_answers_of_the_wrong_kind_are_typed_errors() {
    check_shapes(read_shapes("runQuery"));
}

#[test]
fn commit_answers_of_the_wrong_kind_are_typed_errors() {
    check_shapes(commit_shapes());
}

/// DESIGN §4.4: two documents carrying one lock id are an inconsistency. It is reported
/// (warned about) and nothing is touched: release, extend and lookup by id treat the lock id
/// as held by nobody, and send no write.
#[test]
fn two_documents_with_one_lock_id_are_left_alone() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("twice");
    let owner = lease(backend.acquire(&key, TTL));
    let twice = || {
        Injected::rewrite(|mut answer| {
            let items = answer.as_array_mut().expect("runQuery answers an array");
            let mut copy = items[0].clone();
            let name = copy["document"]["name"].as_str().unwrap().to_owned();
            copy["document"]["name"] = json!(format!("{name}-copy"));
            items.push(copy);
            answer
        })
    };
    let commits = faulty.count("commit");
    faulty.inject("runQuery", 1, twice());
    assert!(!backend.release(&owner.lock_id).unwrap());
    faulty.inject("runQuery", 1, twice());
    assert_eq!(backend.extend(&owner.lock_id, TTL).unwrap(), None);
    faulty.inject("runQuery", 1, twice());
    assert_eq!(
        backend.lookup(Lookup::LockId(&owner.lock_id)).unwrap(),
        None
    );
    assert_eq!(faulty.pending(), 0);
    assert_eq!(faulty.count("commit"), commits, "nothing was written");
    let held = get_by_key_raw(&backend, &key).unwrap().expect("left alone");
    assert_eq!(
        (held.lock_id.as_str(), held.info.expires_at_ms),
        (owner.lock_id.as_str(), owner.expires_at_ms)
    );
    assert!(backend.release(&owner.lock_id).unwrap());
}

/// A stale-version answer for a batch renewal: the heartbeat then looks the lease up by its
/// lock id (`runQuery`), which is where an error element used to read as "no lock".
fn stale_batch_write() -> Injected {
    Injected::replace(
        200,
        json!({
            "writeResults": [{}],
            "status": [{ "code": 9, "message": "the document changed" }],
        })
        .to_string(),
    )
}

/// Renewals that meet UNAVAILABLE error elements are retried: the guard keeps its lease (it
/// would be lost only at its deadline), the program is not told it lost the lock, and the
/// release afterwards removes the lock with its one write.
#[test]
fn a_guard_whose_renewals_meet_error_answers_keeps_its_lease() {
    let faulty = FaultyFirestore::start();
    let locker = Locker::new(faulty.builder().build().unwrap());
    let lost = Arc::new(Mutex::new(Vec::new()));
    // Generous TTL: the two failed renewals come back at once (they never reach the
    // emulator), so only a machine stalled for seconds could let the lease run out.
    let options = LockOptions::default()
        .ttl(Duration::from_secs(5))
        .heartbeat(Heartbeat::Every(Duration::from_millis(100)))
        .on_lock_lost({
            let lost = Arc::clone(&lost);
            move |err| lost.lock().unwrap().push(err.to_string())
        });
    // Two renewals fail: each batch write finds the version stale, and the lookup by lock
    // id meets an error element. Neither call is used by acquire.
    faulty.inject("batchWrite", 2, stale_batch_write());
    faulty.inject(
        "runQuery",
        2,
        Injected::replace(200, json!([error_element(14, "UNAVAILABLE")]).to_string()),
    );
    let key = unique("guard-renewals");
    let guard = locker.lock_with(&key, &options).unwrap();
    let acquired_expiry = guard.expires_at_ms();
    wait_until(
        "a renewal to succeed after the failed ones, or the lease to be lost",
        Duration::from_secs(60),
        || guard.is_lost() || (faulty.pending() == 0 && guard.expires_at_ms() > acquired_expiry),
    );
    assert!(
        lost.lock().unwrap().is_empty(),
        "reported lost: {:?}",
        lost.lock().unwrap()
    );
    assert!(!guard.is_lost());
    assert_eq!(faulty.count("runQuery"), 2, "both failures were met");
    let commits = faulty.count("commit");
    assert!(guard.release().unwrap(), "the release removed the lock");
    assert_eq!(faulty.count("commit"), commits + 1, "with its one write");
    assert!(!locker.backend().is_locked(&key).unwrap());
}

/// A renewal that meets an error answer fails with its transient code and leaves the lease
/// held; the lease is lost only at its deadline, for having run out (not for the lock being
/// gone), and its release still sends the write that removes the lock.
#[test]
fn a_guard_whose_renewal_fails_is_lost_only_at_its_deadline_and_still_released() {
    let faulty = FaultyFirestore::start();
    let locker = Locker::new(faulty.builder().build().unwrap());
    let lost = Arc::new(Mutex::new(Vec::new()));
    // The TTL only has to outlast one failed renewal; the test then waits for it to run out.
    let options = LockOptions::default()
        .ttl(Duration::from_secs(5))
        .heartbeat(Heartbeat::Off)
        .on_lock_lost({
            let lost = Arc::clone(&lost);
            move |err| lost.lock().unwrap().push(err.message().to_owned())
        });
    let key = unique("guard-runs-out");
    let guard = locker.lock_with(&key, &options).unwrap();
    // The renewal's write (a batch of one) finds its version stale, so it looks the lease up
    // by lock id, and that read meets an error element.
    faulty.inject("batchWrite", 1, stale_batch_write());
    faulty.inject(
        "runQuery",
        1,
        Injected::replace(200, json!([error_element(14, "UNAVAILABLE")]).to_string()),
    );
    let err = guard.extend(Duration::from_secs(5)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert_eq!(faulty.pending(), 0, "the renewal met both answers");
    let commits = faulty.count("commit");
    wait_until("the lease to run out", Duration::from_secs(60), || {
        !lost.lock().unwrap().is_empty()
    });
    assert!(guard.is_lost());
    let why = lost.lock().unwrap().clone();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].ends_with("it ran out before a renewal succeeded"),
        "{why:?}"
    );
    // The lapsed lease is released in the background at once, while the guard still lives.
    wait_until("the release write", Duration::from_secs(60), || {
        faulty.count("commit") > commits
    });
    guard.release().unwrap();
}

/// Only an answer that decodes feeds the clock-skew estimate: a made-up time in a bad
/// answer does not.
#[test]
fn bad_answers_do_not_feed_the_clock_skew_estimate() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("skew");
    faulty.inject(
        "batchGet",
        1,
        Injected::replace(
            200,
            json!([{ "readTime": "2000-01-01T00:00:00Z" }]).to_string(),
        ),
    );
    let err = backend.is_locked(&key).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert_eq!(backend.clock_skew(), None);
    assert!(!backend.is_locked(&key).unwrap());
    let skew = backend.clock_skew().expect("measured from the real answer");
    assert!(skew.offset_ms.abs() < 60_000, "{skew:?}");
}

/// A guard and what its release reported (`on_release_error`).
fn guard_with_release_errors(
    faulty: &FaultyFirestore,
    key: &str,
) -> (
    syncguard::LockGuard,
    Arc<Mutex<Vec<ErrorCode>>>,
    Locker<FirestoreBackend>,
) {
    let locker = Locker::new(faulty.builder().build().unwrap());
    let errors = Arc::new(Mutex::new(Vec::new()));
    let options = LockOptions::default()
        .ttl(TTL)
        .heartbeat(Heartbeat::Off)
        .on_release_error({
            let errors = Arc::clone(&errors);
            move |err| errors.lock().unwrap().push(err.code())
        });
    let guard = locker.lock_with(key, &options).unwrap();
    (guard, errors, locker)
}

/// A release whose write meets an error answer (the write did not happen) is tried again by
/// lock id, which finds the lock and removes it: dropping the guard frees the lock, and
/// nothing is reported.
#[test]
fn a_guard_release_that_meets_an_error_answer_is_retried() {
    let faulty = FaultyFirestore::start();
    let key = unique("release-retried");
    let (guard, errors, locker) = guard_with_release_errors(&faulty, &key);
    let (commits, queries) = (faulty.count("commit"), faulty.count("runQuery"));
    faulty.inject(
        "commit",
        1,
        Injected::replace(200, json!([error_element(14, "UNAVAILABLE")]).to_string()),
    );
    drop(guard);
    assert_eq!(faulty.pending(), 0);
    assert_eq!(errors.lock().unwrap().as_slice(), &[]);
    assert_eq!(
        (faulty.count("commit"), faulty.count("runQuery")),
        (commits + 2, queries + 1),
        "the write, then a lookup by lock id and the write again"
    );
    assert!(!locker.backend().is_locked(&key).unwrap());
}

/// A release whose write happened but whose answer was garbled: the retry finds the lock
/// gone while it would still be live, which only this release's own write does, so `release`
/// answers `true` (removed, as a permit's release does), and the lock is free.
#[test]
fn a_guard_release_whose_answer_is_lost_finds_the_lock_gone() {
    let faulty = FaultyFirestore::start();
    let key = unique("release-garbled");
    let (guard, errors, locker) = guard_with_release_errors(&faulty, &key);
    faulty.inject("commit", 1, Injected::rewrite_body(|_| b"<html>".to_vec()));
    assert!(guard.release().unwrap());
    assert_eq!(faulty.pending(), 0);
    assert_eq!(errors.lock().unwrap().as_slice(), &[]);
    assert!(!locker.backend().is_locked(&key).unwrap());
}

/// A release that keeps meeting error answers is reported (`on_release_error`, with the
/// transient code) after its write and its retry were sent; the lock stays its owner's, to
/// expire or to be released by lock id later.
#[test]
fn a_guard_release_that_keeps_failing_is_reported() {
    let faulty = FaultyFirestore::start();
    let key = unique("release-reported");
    let (guard, errors, locker) = guard_with_release_errors(&faulty, &key);
    let lock_id = guard.lock_id().to_owned();
    let (commits, queries) = (faulty.count("commit"), faulty.count("runQuery"));
    let unavailable =
        || Injected::replace(200, json!([error_element(14, "UNAVAILABLE")]).to_string());
    faulty.inject("commit", 1, unavailable());
    faulty.inject("runQuery", 1, unavailable());
    drop(guard);
    assert_eq!(faulty.pending(), 0);
    assert_eq!(
        errors.lock().unwrap().as_slice(),
        &[ErrorCode::ServiceUnavailable]
    );
    assert!(faulty.count("commit") > commits && faulty.count("runQuery") > queries);
    // The failed release is tried again in the background, and frees the key.
    wait_until(
        "the release retried in the background",
        Duration::from_secs(60),
        || get_by_key_raw(locker.backend(), &key).is_ok_and(|held| held.is_none()),
    );
    assert!(
        !locker.backend().release(&lock_id).unwrap(),
        "released already"
    );
}
