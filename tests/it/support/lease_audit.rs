//! The audit of one contended key: every holder marks its entry (after `acquire` returned) and
//! its exit (before it calls `release`), so two holders inside at once, or a fence that does not
//! grow, shows up.
//!
//! A holder whose thread stalls past its lease's expiry (a loaded machine, a failover) is still
//! inside when the next holder legitimately takes the expired lock, and a stalled holder may
//! enter after a newer one: the lock did its job there, and the lower fence is how a real
//! resource would refuse the stale holder. So an overlap of marks counts as a violation only if
//! the two leases overlap in the servers' time (each lease runs from its acquisition to its
//! expiry, both read from the backend); otherwise it is kept as a *stale holder* and printed.
//! The servers' clock only ever excuses an overlap of marks, it never accuses: a clock step can
//! hide a violation, not invent one. A repeated fence is never excused.
//!
//! Every violation carries the audit's recent events (marks, acquisitions, errors, the run's
//! phases), with local and server times on one scale: every server of a test deployment runs on
//! this machine, with this machine's clock.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use syncguard::{ErrorCode, Lease};

/// How many recent events a violation carries.
const EVENTS_KEPT: usize = 40;

/// A lease inside the audit, with its times in ms since the audit began (Unix time of the
/// machine's clock, which is the servers' clock too).
#[derive(Clone, Debug)]
struct Held {
    holder: usize,
    fence: u64,
    /// When the server granted it: its expiry less the TTL asked for.
    granted: i64,
    expires: i64,
    entered: i64,
}

impl Held {
    /// Whether the two leases were live at the same moment on the servers' clock.
    fn overlaps(&self, other: &Held) -> bool {
        self.granted < other.expires && other.granted < self.expires
    }

    fn describe(&self) -> String {
        format!(
            "thread {} with fence {} (granted at {} ms, expiring at {} ms, entered at {} ms)",
            self.holder, self.fence, self.granted, self.expires, self.entered
        )
    }
}

#[derive(Default)]
struct State {
    inside: Vec<Held>,
    /// The lease with the highest fence entered so far.
    highest: Option<Held>,
    entries: usize,
    /// The oldest lease seen leaving (ms from its grant to its exit), and which it was: how
    /// close holders came to outliving their leases.
    oldest_exit: Option<(i64, Held)>,
    violations: Vec<String>,
    stale: Vec<String>,
    errors: Vec<(ErrorCode, String)>,
    events: VecDeque<String>,
}

impl State {
    fn event(&mut self, at: i64, what: String) {
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(format!("{at:>7} ms  {what}"));
    }

    fn violation(&mut self, what: String) {
        let events: Vec<&str> = self.events.iter().map(String::as_str).collect();
        self.violations.push(format!(
            "{what}\n  recent events (ms since the audit began; lease times are the servers'):\n    {}",
            events.join("\n    ")
        ));
    }
}

/// The shared audit of one key's holders; see the module docs.
pub struct LeaseAudit {
    ttl_ms: i64,
    began_ms: i64,
    state: Mutex<State>,
}

/// Unix time in ms on this machine's clock.
fn unix_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_millis()).expect("ms since 1970 fit an i64")
}

impl LeaseAudit {
    /// An audit of leases acquired with `ttl`.
    pub fn new(ttl: Duration) -> LeaseAudit {
        LeaseAudit {
            ttl_ms: i64::try_from(ttl.as_millis()).expect("a TTL in ms fits an i64"),
            began_ms: unix_ms(),
            state: Mutex::new(State::default()),
        }
    }

    fn now(&self) -> i64 {
        unix_ms() - self.began_ms
    }

    /// `holder` entered with `lease`, which `acquire` returned after `took`.
    pub fn enter(&self, holder: usize, lease: &Lease, took: Duration) {
        let entered = self.now();
        let expires = lease.expires_at_ms - self.began_ms;
        let held = Held {
            holder,
            fence: lease.fence.value(),
            granted: expires - self.ttl_ms,
            expires,
            entered,
        };
        let mut state = self.state.lock().unwrap();
        state.entries += 1;
        state.event(
            entered,
            format!(
                "in:  {} (acquire took {} ms)",
                held.describe(),
                took.as_millis()
            ),
        );
        for other in state.inside.clone() {
            let what = format!(
                "{} entered while {} was inside",
                held.describe(),
                other.describe()
            );
            if held.overlaps(&other) {
                state.violation(format!("two holders: {what}"));
            } else {
                state.stale.push(what);
            }
        }
        match state.highest.clone() {
            Some(highest) if held.fence == highest.fence => state.violation(format!(
                "a repeated fence: {} after {}",
                held.describe(),
                highest.describe()
            )),
            Some(highest) if held.fence < highest.fence => {
                let what = format!("{} entered after {}", held.describe(), highest.describe());
                // A lower fence is only right for a lease that ran out before the higher one
                // was granted: a holder that entered late, which the fence tells apart.
                if held.expires <= highest.granted {
                    state.stale.push(what);
                } else {
                    state.violation(format!("a fence that did not grow: {what}"));
                }
            }
            _ => state.highest = Some(held.clone()),
        }
        state.inside.push(held);
    }

    /// `holder` left (and is about to release).
    pub fn exit(&self, holder: usize) {
        let at = self.now();
        let mut state = self.state.lock().unwrap();
        let position = state
            .inside
            .iter()
            .position(|held| held.holder == holder)
            .unwrap_or_else(|| panic!("thread {holder} left without being inside"));
        let held = state.inside.remove(position);
        let age = at - held.granted;
        if state
            .oldest_exit
            .as_ref()
            .is_none_or(|(oldest, _)| age > *oldest)
        {
            state.oldest_exit = Some((age, held));
        }
        state.event(at, format!("out: thread {holder}"));
    }

    /// A failed call of `holder`.
    pub fn error(&self, holder: usize, code: ErrorCode, message: String) {
        let at = self.now();
        let mut state = self.state.lock().unwrap();
        let short: String = message.chars().take(160).collect();
        state.event(at, format!("thread {holder}: {code:?}: {short}"));
        state.errors.push((code, message));
    }

    /// A step of the run (a kill, a promotion), for the events.
    pub fn note(&self, what: &str) {
        let at = self.now();
        self.state.lock().unwrap().event(at, format!("--- {what}"));
    }

    /// How many leases entered.
    pub fn entries(&self) -> usize {
        self.state.lock().unwrap().entries
    }

    /// The last `n` errors.
    pub fn last_errors(&self, n: usize) -> Vec<(ErrorCode, String)> {
        let state = self.state.lock().unwrap();
        state.errors[state.errors.len().saturating_sub(n)..].to_vec()
    }

    /// The oldest lease seen leaving, described.
    pub fn oldest_exit(&self) -> String {
        match &self.state.lock().unwrap().oldest_exit {
            Some((age, held)) => format!("{age} ms after its grant: {}", held.describe()),
            None => "none".to_owned(),
        }
    }

    /// Every error so far.
    pub fn errors(&self) -> Vec<(ErrorCode, String)> {
        self.state.lock().unwrap().errors.clone()
    }

    /// Every violation so far, each with the events before it.
    pub fn violations(&self) -> Vec<String> {
        self.state.lock().unwrap().violations.clone()
    }

    /// Overlaps of marks the leases' times explain (holders that outlived their leases).
    pub fn stale_holders(&self) -> Vec<String> {
        self.state.lock().unwrap().stale.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncguard::Fence;

    const TTL: Duration = Duration::from_secs(3);

    fn lease(audit: &LeaseAudit, fence: u64, granted_ms: i64) -> Lease {
        Lease {
            lock_id: format!("lock-{fence}"),
            fence: Fence::from_counter(fence).unwrap(),
            expires_at_ms: audit.began_ms + granted_ms + 3000,
        }
    }

    #[test]
    fn one_holder_at_a_time_with_growing_fences_passes() {
        let audit = LeaseAudit::new(TTL);
        for (fence, holder) in [(1, 0), (2, 1), (3, 0)] {
            let granted = i64::try_from(fence).unwrap() * 10;
            audit.enter(holder, &lease(&audit, fence, granted), Duration::ZERO);
            audit.exit(holder);
        }
        assert!(audit.violations().is_empty(), "{:?}", audit.violations());
        assert!(audit.stale_holders().is_empty());
    }

    #[test]
    fn overlapping_leases_are_a_violation() {
        let audit = LeaseAudit::new(TTL);
        audit.enter(0, &lease(&audit, 1, 0), Duration::ZERO);
        // Granted while the first lease was still live.
        audit.enter(1, &lease(&audit, 2, 2999), Duration::ZERO);
        let violations = audit.violations();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(
            violations[0].starts_with("two holders: thread 1"),
            "{violations:?}"
        );
        assert!(
            violations[0].contains("in:  thread 0 with fence 1"),
            "the events"
        );
    }

    #[test]
    fn a_holder_that_outlived_its_lease_is_stale_not_a_violation() {
        let audit = LeaseAudit::new(TTL);
        audit.enter(0, &lease(&audit, 1, 0), Duration::ZERO);
        // Granted once the first lease expired, while its thread is still inside.
        audit.enter(1, &lease(&audit, 2, 3000), Duration::ZERO);
        audit.exit(0);
        audit.exit(1);
        // A holder that stalled before entering: its lease ran out before fence 4 was granted.
        audit.enter(1, &lease(&audit, 4, 9000), Duration::ZERO);
        audit.exit(1);
        audit.enter(0, &lease(&audit, 3, 5000), Duration::ZERO);
        audit.exit(0);
        assert!(audit.violations().is_empty(), "{:?}", audit.violations());
        assert_eq!(
            audit.stale_holders().len(),
            2,
            "{:?}",
            audit.stale_holders()
        );
    }

    #[test]
    fn a_lower_fence_on_a_live_lease_and_a_repeated_fence_are_violations() {
        let audit = LeaseAudit::new(TTL);
        audit.enter(0, &lease(&audit, 5, 4000), Duration::ZERO);
        audit.exit(0);
        // Fence 4 granted after fence 5: the counter went back.
        audit.enter(1, &lease(&audit, 4, 5000), Duration::ZERO);
        audit.exit(1);
        // The same fence again, long after: never excused.
        audit.enter(1, &lease(&audit, 5, 20_000), Duration::ZERO);
        audit.exit(1);
        let violations = audit.violations();
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert!(violations[0].starts_with("a fence that did not grow"));
        assert!(violations[1].starts_with("a repeated fence"));
    }
}
