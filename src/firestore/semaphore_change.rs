//! The changes made to a document of permit-like leases ([`PermitChange`]: take, give back,
//! renew a lease, leave the line, break) — a semaphore's permits, or a lock's shared holders in its
//! fence counter document — how each applies to the document as read, and what it answers;
//! with what an earlier attempt of it may have left behind (a commit whose answer was lost), so
//! that the next attempt recognises its own work: an acquisition its lock id, a release its
//! removal, a waiter its place.

use std::time::{Duration, Instant};

use super::combiner::Change;
use super::holders_break::{BreakAsk, was_applied};
use super::readers_doc::MAX_READERS;
use super::semaphore_doc::{Permit, SemaphoreDoc};
use crate::driver::{
    Acquisitions, Broken, Extension, Holder, Key, Line, LockId, Outcome, Permits,
    TIME_TOLERANCE_MS, Ttl, is_live,
};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;

/// One change to a document of permit-like leases, with what earlier attempts of it left in
/// doubt.
pub(super) enum PermitChange {
    /// Take one of `slots` under `lock_id` (the same at every attempt), heeding the
    /// document's line as `line` asks.
    Take {
        slots: Slots,
        ttl: Ttl,
        holder: Option<Holder>,
        line: LineAsk,
        lock_id: String,
        /// A commit that carried it may have been applied.
        maybe_written: bool,
    },
    /// Give back the permit held under `lock_id`.
    GiveBack {
        lock_id: String,
        /// A commit that removed it may have been applied; the permit's expiry then.
        maybe_removed_live_until: Option<i64>,
    },
    /// Renew the permit held under `lock_id` to *now + ttl*.
    Renew { lock_id: String, ttl: Ttl },
    /// Leave the semaphore's line: remove the place `place`.
    Leave { place: LockId },
    /// Break the holders `ask` names (`breaking.rs`).
    Break {
        ask: BreakAsk,
        /// The break a commit without a usable answer carried.
        sent: Option<Broken>,
    },
}

/// What an acquisition takes.
pub(super) enum Slots {
    /// One of a semaphore's permits.
    Permit(Permits),
    /// A shared hold of a lock: granted beside other readers (up to [`MAX_READERS`]), never
    /// while a writer holds the key.
    Shared,
}

/// A [`Line`], owned: a change waits for its write in another thread's hands.
pub(super) enum LineAsk {
    Ignore,
    Keep,
    Wait(LockId),
    WaitAt(LockId, u64),
}

impl LineAsk {
    pub(super) fn of(line: Line<'_>) -> LineAsk {
        match line {
            Line::Ignore => LineAsk::Ignore,
            Line::Keep => LineAsk::Keep,
            Line::Wait(place) => LineAsk::Wait(place.clone()),
            Line::WaitAt(place, ticket) => LineAsk::WaitAt(place.clone(), ticket),
        }
    }

    fn line(&self) -> Line<'_> {
        match self {
            LineAsk::Ignore => Line::Ignore,
            LineAsk::Keep => Line::Keep,
            LineAsk::Wait(place) => Line::Wait(place),
            LineAsk::WaitAt(place, ticket) => Line::WaitAt(place, *ticket),
        }
    }
}

/// What a [`PermitChange`] did.
pub(super) enum PermitAnswer {
    Taken(Acquisitions),
    GivenBack(Outcome<()>),
    Renewed(Outcome<Extension>),
    Left,
    Broken(Broken),
}

impl Change for PermitChange {
    type Answer = Tried;
    type Memo = Option<Committed>;
}

/// What one attempt did with a change: the change handed back (with what the attempt may
/// have left in doubt) and what comes next.
pub(super) struct Tried {
    pub(super) change: PermitChange,
    pub(super) step: Step,
}

/// What comes after an attempt at a change.
pub(super) enum Step {
    /// Its answer: the document was written with it, or needed no write for it, or the
    /// attempt failed for good.
    Answered(Result<PermitAnswer>),
    /// Its commit lost a race: again, within the time given (the lease it renews has left).
    Again(Option<Duration>),
    /// Its commit got no usable answer (`error`): read again once, within the time given.
    AgainUnanswered(LockError, Option<Duration>),
}

/// A semaphore document as this backend's last commit of it left it: its `updateTime` and
/// contents. The next write starts from it instead of reading; its commit is conditioned on
/// that `updateTime`, so it applies only if nobody wrote the document since (else it reads).
pub(super) struct Committed {
    pub(super) update_time: String,
    pub(super) doc: SemaphoreDoc,
}

/// A change applied to a document as read: its answer if that document is committed, whether
/// it changed the document, and the expiry (as read) of the permit it renews or removes.
pub(super) struct Applied {
    pub(super) answer: Result<PermitAnswer>,
    pub(super) wrote: bool,
    pub(super) live_until: Option<i64>,
}

impl Applied {
    fn unwritten(answer: Result<PermitAnswer>) -> Applied {
        Applied {
            answer,
            wrote: false,
            live_until: None,
        }
    }
}

impl PermitChange {
    /// Applies the change to `doc` (of `key`) as read at `now` (the client clock, which
    /// leases are judged by) and `line_now` (Firestore's time, which the line is judged by);
    /// `writer_live` when the key's exclusive lock is held (which only shared holds heed).
    pub(super) fn apply(
        &self,
        doc: &mut SemaphoreDoc,
        now: i64,
        line_now: i64,
        writer_live: bool,
        key: &Key,
    ) -> Applied {
        match self {
            PermitChange::Take {
                slots,
                ttl,
                holder,
                line,
                lock_id,
                ..
            } => {
                if let Some(at) = doc.position(lock_id)
                    && doc.permits[at].is_live(now)
                {
                    // An earlier commit of this acquisition went through, its answer lost:
                    // the permit is this caller's, and nothing more is written.
                    let permit = &doc.permits[at];
                    return Applied::unwritten(Ok(PermitAnswer::Taken(Acquisitions::granted(
                        lock_id.clone(),
                        permit.fence,
                        permit.expires_at_ms,
                        None,
                    ))));
                }
                // Only live permits count; the expired ones go with this commit, if there is
                // one (this caller's own, expired, among them: it takes a new permit).
                doc.reclaim(now);
                let (free, shared) = match slots {
                    Slots::Permit(permits) => (
                        (permits.get() as usize).saturating_sub(doc.permits.len()),
                        false,
                    ),
                    Slots::Shared => (
                        usize::from(!writer_live && doc.permits.len() < MAX_READERS),
                        true,
                    ),
                };
                let admission =
                    doc.line
                        .admit(line.line(), free, shared, line_now, holder.as_ref());
                if !admission.granted {
                    // A waiter's place, taken or renewed, is written; a single attempt leaves
                    // expired places to the next write. A waiter learns how many places stand
                    // ahead of its own.
                    let refused = Acquisitions::locked_at(admission.position);
                    return Applied {
                        answer: Ok(PermitAnswer::Taken(refused)),
                        wrote: admission.changed && line.line().place().is_some(),
                        live_until: None,
                    };
                }
                // Checked before the commit: a counter at the limit writes nothing.
                let counter = doc.counter + 1;
                let fence = match Fence::from_counter(counter) {
                    Ok(fence) => fence,
                    Err(error) => return Applied::unwritten(Err(error.with_key(key.as_str()))),
                };
                let expires_at_ms = now.saturating_add(ttl.as_millis());
                doc.counter = counter;
                doc.permits.push(Permit {
                    lock_id: lock_id.clone(),
                    fence,
                    expires_at_ms,
                    acquired_at_ms: now,
                    holder: holder.as_ref().map(Holder::to_string),
                });
                Applied {
                    answer: Ok(PermitAnswer::Taken(Acquisitions::granted(
                        lock_id.clone(),
                        fence,
                        expires_at_ms,
                        None,
                    ))),
                    wrote: true,
                    live_until: None,
                }
            }
            PermitChange::GiveBack {
                lock_id,
                maybe_removed_live_until,
            } => {
                let Some(at) = doc.position(lock_id) else {
                    // Gone while it would still be live: only this release's own earlier
                    // commit, whose answer was lost, removes a live permit.
                    let outcome = match maybe_removed_live_until {
                        Some(until) if is_live(*until, now, TIME_TOLERANCE_MS) => {
                            Outcome::Applied(())
                        }
                        _ => Outcome::NotFound,
                    };
                    return Applied::unwritten(Ok(PermitAnswer::GivenBack(outcome)));
                };
                let permit = doc.permits.remove(at);
                let outcome = if permit.is_live(now) {
                    Outcome::Applied(())
                } else {
                    Outcome::Expired
                };
                // The document is written anyway: expired permits of others go with it.
                doc.reclaim(now);
                Applied {
                    answer: Ok(PermitAnswer::GivenBack(outcome)),
                    wrote: true,
                    live_until: permit.is_live(now).then_some(permit.expires_at_ms),
                }
            }
            PermitChange::Renew { lock_id, ttl } => match doc.position(lock_id) {
                None => Applied::unwritten(Ok(PermitAnswer::Renewed(Outcome::NotFound))),
                Some(at) if doc.permits[at].is_live(now) => {
                    let live_until = doc.permits[at].expires_at_ms;
                    let expires_at_ms = now.saturating_add(ttl.as_millis());
                    doc.permits[at].expires_at_ms = expires_at_ms;
                    Applied {
                        answer: Ok(PermitAnswer::Renewed(Outcome::Applied(Extension {
                            expires_at_ms,
                            version: None,
                        }))),
                        wrote: true,
                        live_until: Some(live_until),
                    }
                }
                // Expired: removed, never revived.
                Some(at) => {
                    doc.permits.remove(at);
                    Applied {
                        answer: Ok(PermitAnswer::Renewed(Outcome::Expired)),
                        wrote: true,
                        live_until: None,
                    }
                }
            },
            PermitChange::Leave { place } => Applied {
                answer: Ok(PermitAnswer::Left),
                wrote: doc.line.leave(place),
                live_until: None,
            },
            PermitChange::Break { ask, sent } => {
                if let Some(sent) = sent
                    && was_applied(sent, |id| doc.position(id).is_some())
                {
                    return Applied::unwritten(Ok(PermitAnswer::Broken(sent.clone())));
                }
                match doc.break_holders(ask, now, key.as_str()) {
                    Ok((broken, wrote)) => {
                        if wrote {
                            // Written anyway: expired holders of others go with it.
                            doc.reclaim(now);
                        }
                        Applied {
                            answer: Ok(PermitAnswer::Broken(broken)),
                            wrote,
                            live_until: None,
                        }
                    }
                    Err(error) => Applied::unwritten(Err(error)),
                }
            }
        }
    }

    /// The answer of an acquisition that keeps losing races once a third of its TTL has gone
    /// since it was `asked` (unless a commit of it may have been applied: then only a read
    /// tells). The Locker counts a lease's life from when it asked, so a grant that came later
    /// would come with less of it left than its renewals need: a waiter is refused instead
    /// (it stands again at its next attempt, asking afresh; no position, as no line was
    /// decided), a single attempt fails `ServiceUnavailable` (transient).
    pub(super) fn overdue(&self, asked: Instant) -> Option<Result<PermitAnswer>> {
        let PermitChange::Take {
            ttl,
            line,
            maybe_written: false,
            ..
        } = self
        else {
            return None;
        };
        let budget = Duration::from_millis(u64::try_from(ttl.as_millis() / 3).unwrap_or(0));
        if asked.elapsed() < budget {
            return None;
        }
        Some(match line.line().place() {
            Some(_) => Ok(PermitAnswer::Taken(Acquisitions::locked_at(None))),
            None => Err(LockError::new(
                ErrorCode::ServiceUnavailable,
                "Firestore kept changing under this acquisition for a third of its TTL",
            )),
        })
    }

    /// Notes that a commit carrying this change as `applied` may have been applied although
    /// no answer says so.
    pub(super) fn may_have_been_written(&mut self, applied: &Applied) {
        if !applied.wrote {
            return;
        }
        match self {
            // Only a permit it wrote puts an acquisition in doubt, not a place in line.
            PermitChange::Take { maybe_written, .. } => {
                if matches!(
                    applied.answer,
                    Ok(PermitAnswer::Taken(Acquisitions::Acquired(_)))
                ) {
                    *maybe_written = true;
                }
            }
            PermitChange::GiveBack {
                maybe_removed_live_until,
                ..
            } => {
                if applied.live_until.is_some() {
                    *maybe_removed_live_until = applied.live_until;
                }
            }
            PermitChange::Break { sent, .. } => {
                if let Ok(PermitAnswer::Broken(broken)) = &applied.answer {
                    *sent = Some(broken.clone());
                }
            }
            PermitChange::Renew { .. } | PermitChange::Leave { .. } => {}
        }
    }

    /// The error this change answers when its write failed with `error`: an acquisition that
    /// may have been written is in doubt, with the lock id it would hold.
    pub(super) fn failed(&self, error: &LockError, key: &Key) -> LockError {
        let copy = LockError::new(error.code(), error.message()).with_key(key.as_str());
        match self {
            PermitChange::Take {
                lock_id,
                maybe_written: true,
                ..
            } => copy.in_doubt(lock_id.clone()),
            _ => copy,
        }
    }
}

/// A change answered with another kind of answer than it asks for: a bug.
pub(super) fn mismatched(answer: Option<Result<PermitAnswer>>) -> LockError {
    match answer {
        Some(Err(error)) => error,
        _ => LockError::internal("a Firestore holders' change got another change's answer"),
    }
}
