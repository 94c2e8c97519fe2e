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
    self, PgServer, TTL, break_all, break_note, create_typescript_tables, drop_tables, held_in,
    patient_postgres, shared_postgres, unique,
};
use syncguard::driver::{
    Acquisition, BreakDelay, BreakOrder, Broken, Driver, DriverExt, Find, Holder, Key, LeaseKind,
    LeaseRef, LockId, LockRecord, Mode, Outcome, Request, Ttl, generate_lock_id, is_marker,
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
/// Whether `key` can be acquired in `mode` now (given back at once when it can).
#[track_caller]
fn grantable(backend: &dyn Driver, key: &Key, mode: Mode) -> Option<Lease> {
    match backend.acquire_one(&Request::one(key, ttl(TTL)).mode(mode)) {
        Ok(Acquisition::Acquired { lease, .. }) => Some(lease),
        Ok(_) => None,
        Err(error) => panic!("acquire: {error}"),
    }
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
    let expected = with_note.then(|| break_note().to_string());
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
    let lease = held_in(&backend, &k, Mode::Exclusive, "worker-1");
    let broken = break_all(&backend, &k, LeaseKind::Lock, None, BreakDelay::RestOfLease);
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
    let again = break_all(&backend, &k, LeaseKind::Lock, None, BreakDelay::RestOfLease);
    assert_eq!(again, Broken::default(), "a marker is never broken");

    // Readers.
    let k = key("break-shared");
    let readers = [
        held_in(&backend, &k, Mode::Shared, "reader-1"),
        held_in(&backend, &k, Mode::Shared, "reader-2"),
    ];
    let broken = break_all(
        &backend,
        &k,
        LeaseKind::Shared,
        None,
        BreakDelay::For(ttl(TTL)),
    );
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

    // Permits: five, more than a break sends marker lock ids for at first.
    let k = key("break-permits");
    let six = Mode::permits(6).unwrap();
    let mut permits: Vec<Lease> = (0..6)
        .map(|i| held_in(&backend, &k, six, &format!("p-{i}")))
        .collect();
    let lock_id = LockId::new(&permits[0].lock_id).unwrap();
    assert!(matches!(
        backend.release_lease(LeaseRef::permit(&lock_id, &k)),
        Ok(Outcome::Applied(()))
    ));
    permits.remove(0);
    let broken = break_all(
        &backend,
        &k,
        LeaseKind::Permit,
        None,
        BreakDelay::For(ttl(TTL)),
    );
    assert_eq!(broken.holders.len(), 5, "{broken:?}");
    assert_eq!(broken.markers.len(), 5);
    for (marker, holder) in broken.markers.iter().zip(&broken.holders) {
        assert_marker_for(marker, holder, true);
    }
    let last = permits[4].fence.value();
    assert_eq!(
        broken
            .markers
            .iter()
            .map(|m| m.fence.value())
            .collect::<Vec<_>>(),
        (last + 1..=last + 5).collect::<Vec<_>>()
    );
    assert_eq!(found(&backend, &k, LeaseKind::Permit), broken.markers);
    let five = Mode::permits(5).unwrap();
    assert!(
        grantable(&backend, &k, five).is_none(),
        "the markers take the permits"
    );
    let permit = grantable(&backend, &k, six).expect("a sixth permit is free");
    assert_eq!(permit.fence.value(), last + 6);
}

/// A leader's proclaim (an extension carrying a holder text) renews the lock and replaces its
/// holder text, keeping its fence (the term), by a statement of its own, directly and through
/// PgBouncer; in a heartbeat's batch beside plain extensions too, which keep their holder text.
/// A permit's or a reader's extension with a holder text is refused (`InvalidArgument`).
fn a_proclaim_replaces_the_holder_text(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let k = key("proclaim");
    let lease = held_in(&backend, &k, Mode::Exclusive, "leader-a");
    let lock_id = LockId::new(&lease.lock_id).unwrap();
    let value = Holder::new("leader-b").unwrap();
    let extended = backend
        .extend_lease(LeaseRef::new(&lock_id).with_holder(&value), ttl(TTL * 2))
        .unwrap();
    let Outcome::Applied(extension) = extended else {
        panic!("expected Applied, got {extended:?}");
    };
    assert!(extension.expires_at_ms > lease.expires_at_ms, "renewed");
    let record = &found(&backend, &k, LeaseKind::Lock)[0];
    assert_eq!(record.holder.as_deref(), Some("leader-b"));
    assert_eq!(record.fence, lease.fence, "the term is kept");
    assert_eq!(record.expires_at_ms, extension.expires_at_ms);

    let other_key = key("proclaim-beside");
    let other = held_in(&backend, &other_key, Mode::Exclusive, "plain");
    let other_id = LockId::new(&other.lock_id).unwrap();
    let permit_key = key("proclaim-permit");
    let permit = held_in(&backend, &permit_key, Mode::permits(2).unwrap(), "p");
    let permit_id = LockId::new(&permit.lock_id).unwrap();
    let value = Holder::new("leader-c").unwrap();
    let answers = backend.extend_leases(&[
        (LeaseRef::new(&lock_id).with_holder(&value), ttl(TTL)),
        (LeaseRef::new(&other_id), ttl(TTL)),
        (
            LeaseRef::permit(&permit_id, &permit_key).with_holder(&value),
            ttl(TTL),
        ),
    ]);
    assert!(matches!(answers[0], Ok(Outcome::Applied(_))), "{answers:?}");
    assert!(matches!(answers[1], Ok(Outcome::Applied(_))), "{answers:?}");
    let refused = answers[2].as_ref().unwrap_err();
    assert_eq!(refused.code(), ErrorCode::InvalidArgument, "{refused}");
    let holder_of = |k: &Key| found(&backend, k, LeaseKind::Lock)[0].holder.clone();
    assert_eq!(holder_of(&k).as_deref(), Some("leader-c"));
    assert_eq!(holder_of(&other_key).as_deref(), Some("plain"));
    assert_eq!(
        found(&backend, &permit_key, LeaseKind::Permit)[0]
            .holder
            .as_deref(),
        Some("p"),
        "the refused permit's holder text is left"
    );
}

support::postgres_both_ways!(
    connect: [every_kind_is_broken_into_markers, a_proclaim_replaces_the_holder_text],
    upstream: [a_break_sent_again_by_the_pool_says_its_answer_was_lost],
);

/// Moves the expiry of every row of `key` in `table` to ten minutes before it was acquired
/// (`key` as stored).
fn expire(client: &mut postgres::Client, table: &str, storage_key: &str) {
    client
        .execute(
            &format!("UPDATE {table} SET expires_at_ms = acquired_at_ms - 600000 WHERE key = $1"),
            &[&storage_key],
        )
        .unwrap();
}

/// An expired lock met by a break is removed and not answered: nothing was held, no marker is
/// written, the key is free and its fence counter was not moved.
#[test]
fn an_expired_lock_is_removed_and_not_broken() {
    let backend = support::shared_postgres_backend();
    let k = key("break-expired");
    let lease = held_in(&backend, &k, Mode::Exclusive, "gone");
    let storage_key = backend.storage_key(k.as_str()).unwrap();
    let mut client = shared_postgres().client();
    expire(&mut client, "syncguard_locks", &storage_key);
    let broken = break_all(&backend, &k, LeaseKind::Lock, None, BreakDelay::RestOfLease);
    assert_eq!(broken, Broken::default());
    let rows: i64 = client
        .query_one(
            "SELECT count(*) FROM syncguard_locks WHERE key = $1",
            &[&storage_key],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "the expired row is removed");
    let next = grantable(&backend, &k, Mode::Exclusive).expect("free");
    assert_eq!(
        next.fence.value(),
        lease.fence.value() + 1,
        "no fence drawn"
    );
}

/// A break is announced as a release is (NOTIFY on the release channel, with the key): a
/// `watch_releases` listener hears the broken key, which nothing else ever releases.
#[test]
fn a_break_is_announced_as_a_release() {
    let backend = support::shared_postgres_backend();
    let (heard_tx, heard) = mpsc::channel::<String>();
    let watch = backend
        .watch_releases(std::sync::Arc::new(move |key: &str| {
            let _ = heard_tx.send(key.to_owned());
        }))
        .unwrap()
        .expect("PostgreSQL announces releases");
    // The LISTEN is on its way in the background: releases of a key of its own until one is
    // heard show it listens.
    let probe = key("break-notify-probe");
    watch.watch(&probe);
    let deadline = std::time::Instant::now() + PATIENCE;
    'listening: loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the watch never listened"
        );
        let lease = held_in(&backend, &probe, Mode::Exclusive, "probe");
        let lock_id = LockId::new(&lease.lock_id).unwrap();
        assert!(matches!(
            backend.release_lease(LeaseRef::new(&lock_id)),
            Ok(Outcome::Applied(()))
        ));
        while let Ok(key) = heard.recv_timeout(Duration::from_millis(200)) {
            if key == probe.as_str() {
                break 'listening;
            }
        }
    }
    for kind in [LeaseKind::Lock, LeaseKind::Shared, LeaseKind::Permit] {
        let k = key("break-notify");
        watch.watch(&k);
        let mode = match kind {
            LeaseKind::Lock => Mode::Exclusive,
            LeaseKind::Shared => Mode::Shared,
            LeaseKind::Permit => Mode::permits(2).unwrap(),
        };
        held_in(&backend, &k, mode, "to break");
        let broken = break_all(&backend, &k, kind, None, BreakDelay::None);
        assert_eq!(
            (broken.holders.len(), broken.markers.len()),
            (1, 0),
            "{kind:?}"
        );
        let announced = loop {
            match heard.recv_timeout(PATIENCE) {
                Ok(heard) if heard == k.as_str() => break true,
                Ok(_) => {}
                Err(_) => break false,
            }
        };
        assert!(announced, "the break of a {kind:?} was not announced");
        watch.unwatch(&k);
    }
}

/// Tables the TypeScript SyncGuard made (no `holder` column, no server functions, no tables
/// for readers or permits): a lock is broken there into a marker that is a TypeScript-shaped
/// row (its six columns, a 15-digit fence above the broken one's, a marker's lock id), without
/// the note (no column keeps it); it keeps every acquisition out. Breaking readers or permits
/// is refused as their other calls are there (`InvalidArgument`, run setup). A proclaim there
/// renews the lock (no holder text is stored there, as none is at acquisition).
#[test]
fn a_lock_made_by_typescript_tables_is_broken_into_a_typescript_row() {
    let suffix = generate_lock_id().to_lowercase().replace('-', "_");
    let tables = TableNames::new(
        &format!("bk_locks_{suffix}"),
        &format!("bk_fences_{suffix}"),
    )
    .unwrap();
    let (locks, fences) = (tables.lock_table(), tables.fence_table());
    let mut client = shared_postgres().client();
    create_typescript_tables(&mut client, locks, fences);
    let backend = patient_postgres(&shared_postgres().url())
        .table_name(locks)
        .fence_table_name(fences)
        .build()
        .unwrap();
    let k = key("break-typescript");
    let lease = held_in(&backend, &k, Mode::Exclusive, "node-1");
    let lock_id = LockId::new(&lease.lock_id).unwrap();
    let value = Holder::new("node-2").unwrap();
    assert!(matches!(
        backend.extend_lease(LeaseRef::new(&lock_id).with_holder(&value), ttl(TTL)),
        Ok(Outcome::Applied(_))
    ));

    let broken = break_all(
        &backend,
        &k,
        LeaseKind::Lock,
        None,
        BreakDelay::For(ttl(TTL)),
    );
    assert_eq!(broken.holders.len(), 1, "{broken:?}");
    assert_eq!(broken.holders[0].lock_id, lease.lock_id);
    assert_eq!(broken.markers.len(), 1);
    assert_marker_for(&broken.markers[0], &broken.holders[0], false);
    let rows = client
        .query(&format!("SELECT * FROM {locks}"), &[])
        .unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    let columns: Vec<&str> = row.columns().iter().map(|c| c.name()).collect();
    assert_eq!(
        columns,
        [
            "key",
            "lock_id",
            "expires_at_ms",
            "acquired_at_ms",
            "fence",
            "user_key"
        ]
    );
    let marker = &broken.markers[0];
    assert_eq!(
        row.get::<_, String>("key"),
        backend.storage_key(k.as_str()).unwrap()
    );
    assert_eq!(row.get::<_, String>("lock_id"), marker.lock_id);
    assert_eq!(row.get::<_, String>("user_key"), k.as_str());
    assert_eq!(row.get::<_, i64>("expires_at_ms"), marker.expires_at_ms);
    assert_eq!(row.get::<_, i64>("acquired_at_ms"), marker.acquired_at_ms);
    let fence: String = row.get("fence");
    assert_eq!(fence.len(), 15);
    assert_eq!(fence.parse::<u64>().unwrap(), lease.fence.value() + 1);
    assert!(
        grantable(&backend, &k, Mode::Exclusive).is_none(),
        "the marker holds the key"
    );

    for kind in [LeaseKind::Shared, LeaseKind::Permit] {
        let note = break_note();
        let order = BreakOrder {
            key: &k,
            kind,
            lock_id: None,
            delay: BreakDelay::RestOfLease,
            note: &note,
        };
        let error = backend.break_leases(&order).unwrap_err();
        assert_eq!(
            error.code(),
            ErrorCode::InvalidArgument,
            "{kind:?}: {error}"
        );
        assert!(error.message().contains("`syncguard setup`"), "{error}");
    }
    drop_tables(&tables);
}

/// A break's marker is stored like any lock: it survives a restart of the server and still
/// refuses acquisitions (the "--delay across a store restart"), and once it has
/// expired (moved back here, not waited for) the next grant's fence is above the marker's.
#[test]
fn a_marker_survives_a_restart() {
    let mut server = PgServer::start();
    let backend = patient_postgres(&server.url()).build().unwrap();
    backend.setup_schema().unwrap();
    let k = key("break-restart");
    let lease = held_in(&backend, &k, Mode::Exclusive, "hung");
    let hour = ttl(Duration::from_secs(3600));
    let broken = break_all(&backend, &k, LeaseKind::Lock, None, BreakDelay::For(hour));
    let marker = broken.markers[0].clone();
    assert!(marker.fence > lease.fence);

    server.restart();
    assert_eq!(
        found(&backend, &k, LeaseKind::Lock),
        std::slice::from_ref(&marker)
    );
    assert!(
        grantable(&backend, &k, Mode::Exclusive).is_none(),
        "the marker still holds the key"
    );
    let storage_key = backend.storage_key(k.as_str()).unwrap();
    expire(&mut server.client(), "syncguard_locks", &storage_key);
    let next = grantable(&backend, &k, Mode::Exclusive).expect("free once the marker expired");
    assert!(next.fence > marker.fence, "{next:?} after {marker:?}");
}

/// A reader or a permit granted while a break waits for the key (its statement's snapshot
/// taken before) is broken too: the break sees that the key's counter moved since its
/// snapshot, does nothing and is sent again. The grant is made by hand in a transaction that
/// holds the key as a grant does (the advisory lock for readers, the semaphore's row for
/// permits) until the break is seen waiting for it.
#[test]
fn a_hold_granted_while_the_break_waits_is_broken_too() {
    let backend = support::shared_postgres_backend();
    for kind in [LeaseKind::Shared, LeaseKind::Permit] {
        let k = key("break-while-waiting");
        let (mode, table, counter) = match kind {
            LeaseKind::Shared => (
                Mode::Shared,
                "syncguard_locks_shared",
                "UPDATE syncguard_fence_counters SET fence = fence + 1 WHERE fence_key = $1 \
                 RETURNING fence",
            ),
            _ => (
                Mode::permits(5).unwrap(),
                "syncguard_locks_permits",
                "UPDATE syncguard_locks_semaphores SET fence = fence + 1 WHERE key = $1 \
                 RETURNING fence",
            ),
        };
        let first = held_in(&backend, &k, mode, "first");
        let storage_key = backend.storage_key(k.as_str()).unwrap();
        let counter_key = match kind {
            LeaseKind::Shared => backend.fence_key(k.as_str()).unwrap(),
            _ => storage_key.clone(),
        };
        let mut client = shared_postgres().client();
        let mut grant = client.transaction().unwrap();
        let granting: i32 = grant
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        match kind {
            LeaseKind::Shared => grant
                .execute(
                    "SELECT pg_advisory_xact_lock(hashtext($1))",
                    &[&storage_key],
                )
                .map(drop),
            _ => grant
                .execute(
                    "SELECT 1 FROM syncguard_locks_semaphores WHERE key = $1 FOR UPDATE",
                    &[&storage_key],
                )
                .map(drop),
        }
        .unwrap();
        let broken = std::thread::scope(|scope| {
            let breaking =
                scope.spawn(|| break_all(&backend, &k, kind, None, BreakDelay::For(ttl(TTL))));
            wait_for_a_break_waiting_for(granting);
            let fence: i64 = grant.query_one(counter, &[&counter_key]).unwrap().get(0);
            let second_id = generate_lock_id();
            grant
                .execute(
                    &format!(
                        "INSERT INTO {table} (key, lock_id, expires_at_ms, acquired_at_ms, fence, \
                         user_key, holder) SELECT $1, $2, now_ms + 30000, now_ms, \
                         lpad($3::bigint::text, 15, '0'), $4, 'second' FROM (SELECT \
                         floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms) c"
                    ),
                    &[&storage_key, &second_id, &fence, &k.as_str()],
                )
                .unwrap();
            grant.commit().unwrap();
            breaking.join().unwrap()
        });
        let holders: Vec<_> = broken.holders.iter().map(|h| h.holder.as_deref()).collect();
        assert_eq!(
            holders,
            [Some("first"), Some("second")],
            "{kind:?}: {broken:?}"
        );
        assert_eq!(broken.holders[0].lock_id, first.lock_id);
        assert_eq!(broken.markers.len(), 2);
        assert_eq!(
            found(&backend, &k, kind),
            broken.markers,
            "{kind:?}: only markers left"
        );
    }
}

/// Waits until a break statement waits for a lock the server process `pid` holds.
fn wait_for_a_break_waiting_for(pid: i32) {
    let mut client = shared_postgres().client();
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)) \
                 AND query LIKE '%cardinality($7)%'",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if waiting > 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no break waited");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A break whose answer is lost with its connection (the proxy closes it as the answer comes
/// back: the server has broken the key) is sent again once by the pool, with the same marker
/// lock ids: the repeat finds its own markers, breaks nothing more, and says the break was
/// carried out and its answer lost (`ServiceUnavailable`) — never "nothing held".
fn a_break_sent_again_by_the_pool_says_its_answer_was_lost(upstream: u16) {
    let (proxy, backend) = support::postgres_through_a_proxy(upstream);
    for kind in [LeaseKind::Lock, LeaseKind::Permit] {
        let k = key("break-repeat");
        let mode = match kind {
            LeaseKind::Lock => Mode::Exclusive,
            _ => Mode::permits(3).unwrap(),
        };
        let lease = held_in(&backend, &k, mode, "hung");
        let cuts = proxy.answers_cut();
        proxy.cut_answer_to(b"cardinality($7)");
        let note = break_note();
        let order = BreakOrder {
            key: &k,
            kind,
            lock_id: None,
            delay: BreakDelay::RestOfLease,
            note: &note,
        };
        let error = backend.break_leases(&order).unwrap_err();
        assert_eq!(proxy.answers_cut(), cuts + 1, "an answer was lost");
        assert_eq!(error.code(), ErrorCode::ServiceUnavailable, "{error}");
        assert!(error.message().contains("carried out"), "{error}");
        let left = found(&backend, &k, kind);
        assert_eq!(left.len(), 1, "one marker, no second: {left:?}");
        assert!(is_marker(&left[0].lock_id), "{left:?}");
        assert!(left[0].fence > lease.fence);
    }
}
