//! How a store renews a heartbeat's batch of leases when it cannot do them all in one request:
//! by kind, by key, or one after another — and the answers put back in the batch's order.

#![cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]

use super::lease::{Extension, LeaseKind, LeaseRef, Outcome};
use crate::error::Result;
#[cfg(feature = "firestore")]
use crate::key::Key;
#[cfg(feature = "firestore")]
use crate::lock_id::LockId;
use crate::time::Ttl;

/// A heartbeat batch that may mix kinds of lease (locks, permits, shared holds), extended by a
/// store that keeps them apart: `extend` is called once per kind present, with that kind's
/// leases in the batch's order, and every answer is put back in its lease's place. `extend`
/// answers one result per lease it is given, in order.
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
pub(crate) fn extend_by_kind<'a>(
    leases: &[(LeaseRef<'a>, Ttl)],
    mut extend: impl FnMut(LeaseKind, &[(LeaseRef<'a>, Ttl)]) -> Vec<Result<Outcome<Extension>>>,
) -> Vec<Result<Outcome<Extension>>> {
    let Some(first) = leases.first() else {
        return Vec::new();
    };
    if leases.iter().all(|(lease, _)| lease.kind == first.0.kind) {
        return extend(first.0.kind, leases);
    }
    let mut answers = Vec::with_capacity(leases.len());
    for kind in [LeaseKind::Lock, LeaseKind::Permit, LeaseKind::Shared] {
        let positions: Vec<usize> = (0..leases.len())
            .filter(|&i| leases[i].0.kind == kind)
            .collect();
        if positions.is_empty() {
            continue;
        }
        let batch: Vec<(LeaseRef<'a>, Ttl)> = positions.iter().map(|&i| leases[i]).collect();
        answers.extend(positions.into_iter().zip(extend(kind, &batch)));
    }
    in_order(leases.len(), answers)
}

/// A heartbeat batch of leases that a store renews one key at a time (a key's permits or
/// readers kept in one record): `extend` is called once per key with that key's leases (lock
/// id and TTL, in the batch's order) and answers one result per lease, or one error for them
/// all; every answer is put back in its lease's place. A lease without a key is answered
/// `InvalidArgument`.
#[cfg(feature = "firestore")]
pub(crate) fn extend_by_key<'a>(
    leases: &[(LeaseRef<'a>, Ttl)],
    mut extend: impl FnMut(&'a Key, &[(&'a LockId, Ttl)]) -> Result<Vec<Result<Outcome<Extension>>>>,
) -> Vec<Result<Outcome<Extension>>> {
    let mut answers = Vec::with_capacity(leases.len());
    type Group<'a> = (&'a Key, Vec<(usize, &'a LockId, Ttl)>);
    let mut by_key: std::collections::BTreeMap<&str, Group<'a>> = std::collections::BTreeMap::new();
    for (i, (lease, ttl)) in leases.iter().enumerate() {
        match lease.permit_key() {
            Ok(key) => by_key
                .entry(key.as_str())
                .or_insert_with(|| (key, Vec::new()))
                .1
                .push((i, lease.lock_id, *ttl)),
            Err(error) => answers.push((i, Err(error))),
        }
    }
    for (key, group) in by_key.into_values() {
        let items: Vec<(&LockId, Ttl)> = group
            .iter()
            .map(|(_, lock_id, ttl)| (*lock_id, *ttl))
            .collect();
        let positions = group.iter().map(|(i, ..)| *i);
        match extend(key, &items) {
            Ok(outcomes) => answers.extend(positions.zip(outcomes)),
            Err(error) => answers.extend(positions.map(|i| {
                (
                    i,
                    Err(crate::error::LockError::new(error.code(), error.message())),
                )
            })),
        }
    }
    in_order(leases.len(), answers)
}

/// The answers to a batch of `count` leases, given as `(position, answer)` pairs, in the
/// batch's order; a position without one is answered `Internal` (a store that skipped a lease
/// must not leave it looking renewed).
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
pub(crate) fn in_order(
    count: usize,
    answers: impl IntoIterator<Item = (usize, Result<Outcome<Extension>>)>,
) -> Vec<Result<Outcome<Extension>>> {
    let mut placed: Vec<Option<Result<Outcome<Extension>>>> = (0..count).map(|_| None).collect();
    for (position, answer) in answers {
        if let Some(slot) = placed.get_mut(position) {
            *slot = Some(answer);
        }
    }
    placed
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(crate::error::LockError::internal(
                    "a lease of the batch was left unanswered",
                ))
            })
        })
        .collect()
}
