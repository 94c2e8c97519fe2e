//! An operator's break on PostgreSQL (issue 42), against the shared cluster directly and
//! through the shared PgBouncer (transaction mode): what is specific to this store — one
//! statement sent inline, on this version's tables and on tables the TypeScript SyncGuard made,
//! the rows it leaves (TypeScript-shaped markers), the release it announces, and markers that
//! survive a restart of the server. (The shared `break_contract!` runs the rules on every
//! setup.) And the renewal that replaces a lock's holder text (a leader's proclaim), which has
//! a statement of its own: the hot extension's is unchanged.

use std::sync::mpsc;
use std::time::Duration;

use crate::support::{
    self, PgServer, TTL, create_typescript_tables, drop_tables, patient_postgres, shared_postgres,
    unique,
};
use syncguard::driver::{
    Acquisition, BreakDelay, BreakNote, BreakOrder, Broken, Driver, DriverExt, Find, Holder, Key,
    LeaseKind, LeaseRef, LockId, LockRecord, Mode, Outcome, Request, Ttl, generate_lock_id,
    is_marker,
};
use syncguard::postgres::{PostgresBackend, TableNames};
use syncguard::{ErrorCode, Lease};

/// How long a test waits for something it expects (a hang guard, never a timing assertion).
const PATIENCE: Duration = Duration::from_secs(20);

fn ttl(duration: Duration) -> Ttl {
    Ttl::new(duration).unwrap()
}

fn key(name: &str) -> Key {
    Key::new(&unique(name)).unwrap()
}

/// The operator's note every break here leaves.
fn note() -> Holder {
    BreakNote::new("ops-1:77 syncguard", Some("hung".into()))
        .to_holder()
        .unwrap()
}

/// Acquires `key` in `mode` with the holder text `holder`: it must be granted.
#[track_caller]
fn held(backend: &dyn Driver, key: &Key, mode: Mode, holder: &str) -> Lease {
    let holder = Holder::new(holder).unwrap();
    let request = Request::one(key, ttl(TTL)).mode(mode).holder(Some(&holder));
    match backend.acquire_one(&request) {
        Ok(Acquisition::Acquired { lease, .. }) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// Whether `key` can be acquired in `mode` now (given back at once when it can).
#[track_caller]
fn grantable(backend: &dyn Driver, key: &Key, mode: Mode) -> Option<Lease> {
    match backend.acquire_one(&Request::one(key, ttl(TTL)).mode(mode)) {
        Ok(Acquisition::Acquired { lease, .. }) => Some(lease),
        Ok(_) => None,
        Err(error) => panic!("acquire: {error}"),
    }
}

/// Breaks every live holder of `kind` on `key`, for `delay`.
#[track_caller]
fn break_all(backend: &dyn Driver, key: &Key, kind: LeaseKind, delay: BreakDelay) -> Broken {
    let note = note();
    let order = BreakOrder {
        key,
        kind,
        lock_id: None,
        delay,
        note: &note,
    };
    backend.break_leases(&order).unwrap()
}

/// What `Find` answers for `key`'s `kind`.
fn found(backend: &dyn Driver, key: &Key, kind: LeaseKind) -> Vec<LockRecord> {
    backend.find(Find::Key(key, kind)).unwrap()
}

/// A marker in the place of `broken`, as a break leaves it: a marker's lock id, a fence above
/// the broken one's, the operator's note.
#[track_caller]
fn assert_marker_for(marker: &LockRecord, broken: &LockRecord, with_note: bool) {
    assert!(is_marker(&marker.lock_id), "{marker:?}");
    assert!(marker.fence > broken.fence, "{marker:?} {broken:?}");
    let expected = with_note.then(|| note().to_string());
    assert_eq!(marker.holder, expected, "{marker:?}");
    assert_eq!(marker.key, broken.key);
}

/// Each kind is broken in one statement: the live holders answered as stored, each replaced by
/// a marker with the next fences of the key's sequence and the operator's note, which `find`
/// answers and which keeps the key from an acquisition of the kind it breaks (a lock marker
/// from any lock; a reader's marker from a writer; a permit's marker takes its permit); and the
/// next grant's fence is above the markers'.
fn every_kind_is_broken_into_markers(connect: fn() -> PostgresBackend) {
    let backend = connect();
    // A lock.
    let k = key("break-lock");
    let lease = held(&backend, &k, Mode::Exclusive, "worker-1");
    let broken = break_all(&backend, &k, LeaseKind::Lock, BreakDelay::RestOfLease);
    assert_eq!(broken.holders.len(), 1, "{broken:?}");
    let holder = &broken.holders[0];
    assert_eq!(holder.lock_id, lease.lock_id);
    assert_eq!(holder.fence, lease.fence);
    assert_eq!(holder.holder.as_deref(), Some("worker-1"));
    assert_eq!(broken.markers.len(), 1);
    assert_marker_for(&broken.markers[0], holder, true);
    assert!(
        broken.markers[0].expires_at_ms >= holder.expires_at_ms,
        "the rest of the lease"
    );
    assert_eq!(found(&backend, &k, LeaseKind::Lock), broken.markers);
    assert!(
        grantable(&backend, &k, Mode::Exclusive).is_none(),
        "the marker holds the key"
    );
    assert_eq!(
        backend
            .extend_lease(
                LeaseRef::new(&LockId::new(&lease.lock_id).unwrap()),
                ttl(TTL)
            )
            .unwrap(),
        Outcome::NotFound,
        "the broken holder learns at its next renewal"
    );
    let again = break_all(&backend, &k, LeaseKind::Lock, BreakDelay::RestOfLease);
    assert_eq!(again, Broken::default(), "a marker is never broken");

    // Readers.
    let k = key("break-shared");
    let readers = [
        held(&backend, &k, Mode::Shared, "reader-1"),
        held(&backend, &k, Mode::Shared, "reader-2"),
    ];
    let broken = break_all(&backend, &k, LeaseKind::Shared, BreakDelay::For(ttl(TTL)));
    let fences: Vec<_> = broken.holders.iter().map(|h| h.fence).collect();
    assert_eq!(fences, [readers[0].fence, readers[1].fence], "{broken:?}");
    assert_eq!(broken.markers.len(), 2);
    for (marker, holder) in broken.markers.iter().zip(&broken.holders) {
        assert_marker_for(marker, holder, true);
    }
    let top = broken.markers.iter().map(|m| m.fence).max().unwrap();
    assert_eq!(
        top.value(),
        readers[1].fence.value() + 2,
        "fences drawn in order"
    );
    assert_eq!(found(&backend, &k, LeaseKind::Shared), broken.markers);
    assert!(
        grantable(&backend, &k, Mode::Exclusive).is_none(),
        "readers' markers keep writers out"
    );
    let reader = grantable(&backend, &k, Mode::Shared).expect("a reader gets in beside markers");
    assert!(
        reader.fence > top,
        "the next grant's fence is above the markers'"
    );

    // Permits.
    let k = key("break-permits");
    let two = Mode::permits(2).unwrap();
    let permits = [
        held(&backend, &k, two, "p-1"),
        held(&backend, &k, two, "p-2"),
    ];
    let broken = break_all(&backend, &k, LeaseKind::Permit, BreakDelay::For(ttl(TTL)));
    assert_eq!(broken.holders.len(), 2, "{broken:?}");
    assert_eq!(broken.markers.len(), 2);
    for (marker, holder) in broken.markers.iter().zip(&broken.holders) {
        assert_marker_for(marker, holder, true);
    }
    assert_eq!(
        broken.markers.iter().map(|m| m.fence.value()).max(),
        Some(permits[1].fence.value() + 2)
    );
    assert_eq!(found(&backend, &k, LeaseKind::Permit), broken.markers);
    assert!(
        grantable(&backend, &k, two).is_none(),
        "the markers take the permits"
    );
    let three = Mode::permits(3).unwrap();
    let permit = grantable(&backend, &k, three).expect("a third permit is free");
    assert_eq!(permit.fence.value(), permits[1].fence.value() + 3);
}

support::postgres_both_ways!(connect: [every_kind_is_broken_into_markers]);
