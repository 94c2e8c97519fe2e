//! The differential test of the rule of the line: one rule ([`Places`](crate::driver::Places),
//! [`admit_all`](crate::driver::admit_all)) written four times — in Lua for Redis, in SQL for
//! PostgreSQL, and in Rust for the in-memory store and Firestore. Random sequences of calls
//! are made on the store under test and on a fresh [`MemoryBackend`] (the model) alike, and
//! every answer and every record they leave must agree.
//!
//! The sequences come from a seeded generator (`rand`, a dependency of the crate, because this
//! code ships in `syncguard::testing` where proptest, a dev-dependency, is not available): no
//! shrinking, but each failure prints its seed, and `SYNCGUARD_DIFFERENTIAL_SEED=<seed>`
//! replays it. They cover every kind (lock, permit, shared hold, set of overlapping keys),
//! every [`Line`] (`Ignore`, `Keep`, `Wait`, `WaitAt`), releases, renewals, leaving the line,
//! leases that lapse (a lease of 1 ms, waited out on both before the next call) and lost
//! answers (a call sent twice, as a pool repeats it).
//!
//! Time is kept out of the decisions: leases are long but for the ones waited out, and each
//! sequence ends well within [`PLACE_TTL`](crate::driver::PLACE_TTL) of its start, so no place lapses during one (the two
//! stores' clocks would lapse it at different calls).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};

use crate::driver::{
    self, Acquisitions, Driver, DriverExt as _, Find, Key, KeySet, LeaseKind, LeaseRef, Line,
    LockId, Mode, Outcome, Permits, Request, Ttl, Version,
};
use crate::{LockBackend, MemoryBackend, Result};

use crate::testing::support::{EXPIRY_DEADLINE, unique_key, wait_until};

/// The store under test and the in-memory model make the same random calls, and agree on
/// every answer (granted or not, a ticket or not) and on the records after each call (the
/// holders of each key, its readers and permits, and the order of each line).
pub fn the_rule_agrees_with_the_model<B: LockBackend + 'static>(backend: B) {
    let seed = std::env::var("SYNCGUARD_DIFFERENTIAL_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| rand::rng().random::<u64>());
    // The model numbers new places' tickets as the store does (per line, or store-wide).
    let tickets = backend.describe().tickets;
    for episode in 0..EPISODES {
        let model = MemoryBackend::new().with_ticket_order(tickets);
        Episode::new(&backend, &model, seed.wrapping_add(episode)).play();
    }
}

/// Sequences per run, each on keys of its own.
const EPISODES: u64 = 3;
/// The most calls in a sequence.
const MAX_STEPS: usize = 80;
/// A sequence makes no new call after this long: far within [`PLACE_TTL`](crate::driver::PLACE_TTL), so no place lapses
/// during it.
const EPISODE_BUDGET: Duration = Duration::from_millis(3_000);
const KEYS: usize = 3;
const ACTORS: usize = 4;
const PERMITS: u32 = 2;
const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(1);

/// How an actor waits: a place id per role and keys ([`Waiter`]), so that one place never changes
/// mode or target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Exclusive,
    Shared,
    Permit,
}

impl Role {
    const ALL: [Role; 3] = [Role::Exclusive, Role::Shared, Role::Permit];

    fn line(self) -> LeaseKind {
        match self {
            Role::Permit => LeaseKind::Permit,
            Role::Exclusive | Role::Shared => LeaseKind::Lock,
        }
    }
}

/// What an acquisition asks for (keys by index).
#[derive(Debug, Clone)]
enum Target {
    Lock(usize),
    Permit(usize),
    Shared(usize),
    All(Vec<usize>),
}

impl Target {
    fn role(&self) -> Role {
        match self {
            Target::Lock(_) | Target::All(_) => Role::Exclusive,
            Target::Shared(_) => Role::Shared,
            Target::Permit(_) => Role::Permit,
        }
    }

    fn keys(&self) -> Vec<usize> {
        match self {
            Target::Lock(k) | Target::Permit(k) | Target::Shared(k) => vec![*k],
            Target::All(keys) => keys.clone(),
        }
    }
}

/// How an acquisition heeds the line. `WaitAt` carries the ticket the waiter was last
/// answered (on each store its own), or is `Wait` without one.
#[derive(Debug, Clone, Copy)]
enum Ask {
    Ignore,
    Keep,
    Wait,
    WaitAt,
}

#[derive(Debug, Clone)]
enum Call {
    Acquire {
        actor: usize,
        target: Target,
        ask: Ask,
        short: bool,
        repeated: bool,
    },
    Release(usize),
    Extend(usize),
    Leave {
        actor: usize,
        role: Role,
        key: usize,
    },
}

/// A grant, on one store: a lease per key.
struct Granted {
    kind: LeaseKind,
    keys: Vec<usize>,
    leases: Vec<(String, Option<Version>)>,
}

/// One store's side of a sequence: what it granted, and the tickets it answered.
struct Side<'a> {
    name: &'static str,
    store: &'a dyn Driver,
    /// Every lock id granted, to its actor.
    owners: HashMap<String, usize>,
    tickets: HashMap<Waiter, u64>,
    granted: Vec<Granted>,
}

/// What a key's records and lines look like, in actors: what the two stores must agree on.
#[derive(Debug, PartialEq, Eq)]
struct KeyState {
    holder: Option<usize>,
    readers: Vec<usize>,
    permits: Vec<usize>,
    line: Vec<(usize, bool)>,
    permit_line: Vec<usize>,
}

/// One wait: an actor waiting for one target (its role and its keys, sorted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Waiter {
    actor: usize,
    role: usize,
    keys: Vec<usize>,
}

impl Waiter {
    fn of(actor: usize, target: &Target) -> Self {
        let mut keys = target.keys();
        keys.sort_unstable();
        Waiter {
            actor,
            role: target.role() as usize,
            keys,
        }
    }

    /// Every waiter a sequence can make: per actor, each role on each key, and a set (an
    /// exclusive wait) of every two or three keys.
    fn all() -> Vec<Waiter> {
        let mut targets: Vec<Target> = (0..KEYS)
            .flat_map(|k| [Target::Lock(k), Target::Permit(k), Target::Shared(k)])
            .collect();
        for first in 0..KEYS {
            for second in first + 1..KEYS {
                targets.push(Target::All(vec![first, second]));
            }
        }
        targets.push(Target::All((0..KEYS).collect()));
        (0..ACTORS)
            .flat_map(|actor| targets.iter().map(move |target| Waiter::of(actor, target)))
            .collect()
    }
}

/// Who an unknown lock id or place belongs to: nobody the test knows.
const STRANGER: usize = usize::MAX;

impl<'a> Side<'a> {
    fn new(name: &'static str, store: &'a dyn Driver) -> Self {
        Side {
            name,
            store,
            owners: HashMap::new(),
            tickets: HashMap::new(),
            granted: Vec::new(),
        }
    }

    fn acquire(
        &mut self,
        episode: &Episode<'_>,
        actor: usize,
        target: &Target,
        ask: Ask,
        ttl: Ttl,
    ) -> Result<Acquisitions> {
        let waiter = Waiter::of(actor, target);
        let place = episode.place(&waiter);
        let line = match (ask, self.tickets.get(&waiter)) {
            (Ask::Ignore, _) => Line::Ignore,
            (Ask::Keep, _) => Line::Keep,
            (Ask::WaitAt, Some(ticket)) => Line::WaitAt(place, *ticket),
            (Ask::Wait | Ask::WaitAt, _) => Line::Wait(place),
        };
        let keys = &episode.keys;
        let names: Vec<&str> = target.keys().iter().map(|k| keys[*k].as_str()).collect();
        let set = KeySet::new(&names)?;
        let mode = match target {
            Target::Lock(_) | Target::All(_) => Mode::Exclusive,
            Target::Permit(_) => Mode::Permit(permits()),
            Target::Shared(_) => Mode::Shared,
        };
        let request = Request::all(&set, ttl).mode(mode).line(line);
        let answer = driver::acquire(self.store, &request)?;
        match &answer {
            Acquisitions::Acquired(leases) => {
                self.tickets.remove(&waiter);
                // A set's leases answer its keys in their sorted order.
                let mut granted_keys = target.keys();
                granted_keys.sort_by(|a, b| keys[*a].as_str().cmp(keys[*b].as_str()));
                granted_keys.dedup();
                for (lease, _) in leases {
                    self.owners.insert(lease.lock_id.clone(), actor);
                }
                self.granted.push(Granted {
                    kind: target.role().line_kind_of_lease(),
                    keys: granted_keys,
                    leases: leases
                        .iter()
                        .map(|(lease, version)| (lease.lock_id.clone(), version.clone()))
                        .collect(),
                });
            }
            Acquisitions::Locked {
                ticket: Some(ticket),
                ..
            } => {
                self.tickets.insert(waiter, *ticket);
            }
            Acquisitions::Locked { ticket: None, .. } => {}
        }
        Ok(answer)
    }

    /// Releases (or renews) the `index`-th grant: whether every lease of it was applied.
    fn settle(&mut self, episode: &Episode<'_>, index: usize, renew: bool) -> Result<bool> {
        let Some(granted) = self.granted.get(index) else {
            return Ok(false);
        };
        let mut applied = true;
        for (k, (lock_id, version)) in granted.keys.iter().zip(&granted.leases) {
            let lock_id = LockId::new(lock_id)?;
            let lease = LeaseRef::new(&lock_id)
                .with_key(&episode.keys[*k])
                .with_kind(granted.kind)
                .with_version(version.as_ref());
            applied &= if renew {
                matches!(
                    self.store.extend_lease(lease, Ttl::new(LONG)?)?,
                    Outcome::Applied(_)
                )
            } else {
                matches!(self.store.release_lease(lease)?, Outcome::Applied(()))
            };
        }
        Ok(applied)
    }

    /// Every waiter of `actor` in `role` whose keys include `key` leaves that key's line.
    fn leave(&mut self, episode: &Episode<'_>, actor: usize, role: Role, key: usize) -> Result<()> {
        for (waiter, place) in episode.places_on(actor, role, key) {
            self.tickets.remove(waiter);
            self.store
                .leave_line(&episode.keys[key], role.line(), place)?;
        }
        Ok(())
    }

    fn state(&self, episode: &Episode<'_>, key: usize) -> Result<KeyState> {
        let key = &episode.keys[key];
        let owner = |lock_id: &str| self.owners.get(lock_id).copied().unwrap_or(STRANGER);
        let sorted = |mut actors: Vec<usize>| {
            actors.sort_unstable();
            actors
        };
        Ok(KeyState {
            holder: (self.store.find(Find::Key(key, LeaseKind::Lock))?.first())
                .map(|r| owner(&r.lock_id)),
            readers: sorted(self.owners_of(key, LeaseKind::Shared, owner)?),
            permits: sorted(self.owners_of(key, LeaseKind::Permit, owner)?),
            line: self
                .store
                .find_line(key, LeaseKind::Lock)?
                .iter()
                .map(|p| (episode.actor_of(&p.place_id), p.shared))
                .collect(),
            permit_line: self
                .store
                .find_line(key, LeaseKind::Permit)?
                .iter()
                .map(|p| episode.actor_of(&p.place_id))
                .collect(),
        })
    }

    /// Who holds `key` shared or its semaphore's permits (`kind`), by actor.
    fn owners_of(
        &self,
        key: &Key,
        kind: LeaseKind,
        owner: impl Fn(&str) -> usize,
    ) -> Result<Vec<usize>> {
        let held = self.store.find(Find::Key(key, kind))?;
        Ok(held.iter().map(|r| owner(&r.lock_id)).collect())
    }

    /// Whether none of the leases of the `index`-th grant is live any more.
    fn lapsed(&self, episode: &Episode<'_>, index: usize) -> bool {
        let Some(granted) = self.granted.get(index) else {
            return true;
        };
        granted
            .keys
            .iter()
            .zip(&granted.leases)
            .all(|(k, (id, _))| {
                let key = &episode.keys[*k];
                let live = (self.store.find(Find::Key(key, granted.kind)))
                    .map(|rs| rs.iter().any(|r| &r.lock_id == id));
                matches!(live, Ok(false))
            })
    }
}

impl Role {
    /// The kind of lease an acquisition of this role is granted.
    fn line_kind_of_lease(self) -> LeaseKind {
        match self {
            Role::Exclusive => LeaseKind::Lock,
            Role::Shared => LeaseKind::Shared,
            Role::Permit => LeaseKind::Permit,
        }
    }
}

fn permits() -> Permits {
    Permits::new(PERMITS).unwrap_or_else(|_| unreachable!("{PERMITS} permits are valid"))
}

/// One sequence: its keys, its actors' place ids, the generator, and what was done so far.
struct Episode<'a> {
    seed: u64,
    rng: StdRng,
    keys: Vec<Key>,
    /// A place id per waiter: an actor waits for each of its targets with a place of its own,
    /// as each wait of a `Locker` does (one place id, one ticket, for one acquisition's keys).
    places: Vec<(Waiter, LockId)>,
    store: Option<Side<'a>>,
    model: Option<Side<'a>>,
    log: Vec<String>,
    lapses: usize,
}

impl<'a> Episode<'a> {
    fn new(store: &'a dyn Driver, model: &'a dyn Driver, seed: u64) -> Self {
        let prefix = unique_key("differential");
        Episode {
            seed,
            rng: StdRng::seed_from_u64(seed),
            keys: (0..KEYS)
                .map(|k| Key::new(&format!("{prefix}:{k}")).expect("a valid key"))
                .collect(),
            places: Waiter::all()
                .into_iter()
                .map(|waiter| (waiter, LockId::generate()))
                .collect(),
            store: Some(Side::new(store.describe().backend, store)),
            model: Some(Side::new("model", model)),
            log: Vec::new(),
            lapses: 0,
        }
    }

    fn place(&self, waiter: &Waiter) -> &LockId {
        self.places
            .iter()
            .find(|(known, _)| known == waiter)
            .map(|(_, place)| place)
            .unwrap_or_else(|| unreachable!("every waiter has a place id: {waiter:?}"))
    }

    /// The waiters of `actor` in `role` whose keys include `key`, with their place ids.
    fn places_on(
        &self,
        actor: usize,
        role: Role,
        key: usize,
    ) -> impl Iterator<Item = (&Waiter, &LockId)> {
        self.places
            .iter()
            .filter(move |(waiter, _)| {
                waiter.actor == actor && waiter.role == role as usize && waiter.keys.contains(&key)
            })
            .map(|(waiter, place)| (waiter, place))
    }

    fn actor_of(&self, place_id: &str) -> usize {
        self.places
            .iter()
            .find(|(_, place)| place.as_str() == place_id)
            .map_or(STRANGER, |(waiter, _)| waiter.actor)
    }

    fn play(mut self) {
        let started = Instant::now();
        for _ in 0..MAX_STEPS {
            if started.elapsed() >= EPISODE_BUDGET {
                break;
            }
            let call = self.next_call();
            self.log.push(format!("{call:?}"));
            self.apply(&call);
        }
        // Hygiene on a shared server: what is still held is given back (keys are unique).
        let (mut store, mut model) = self.sides();
        for index in 0..store.granted.len() {
            let _ = store.settle(&self, index, false);
            let _ = model.settle(&self, index, false);
        }
    }

    fn sides(&mut self) -> (Side<'a>, Side<'a>) {
        (
            self.store.take().expect("the store's side"),
            self.model.take().expect("the model's side"),
        )
    }

    fn next_call(&mut self) -> Call {
        let granted = self.store.as_ref().map_or(0, |side| side.granted.len());
        let roll = self.rng.random_range(0..100);
        let actor = self.rng.random_range(0..ACTORS);
        if roll < 20 && granted > 0 {
            return Call::Release(self.rng.random_range(0..granted));
        }
        if roll < 28 && granted > 0 {
            return Call::Extend(self.rng.random_range(0..granted));
        }
        if roll < 40 {
            let role = Role::ALL[self.rng.random_range(0..Role::ALL.len())];
            let key = self.rng.random_range(0..KEYS);
            return Call::Leave { actor, role, key };
        }
        let key = self.rng.random_range(0..KEYS);
        let target = match self.rng.random_range(0..10) {
            0..3 => Target::Lock(key),
            3..5 => Target::Permit(key),
            5..7 => Target::Shared(key),
            _ => {
                let other = (key + self.rng.random_range(1..KEYS)) % KEYS;
                let mut set = vec![key, other];
                if self.rng.random_bool(0.3) {
                    set.push(3 - key - other);
                }
                Target::All(set)
            }
        };
        let ask = match self.rng.random_range(0..20) {
            0..3 => Ask::Ignore,
            3..7 => Ask::Keep,
            7..14 => Ask::Wait,
            _ => Ask::WaitAt,
        };
        let short = self.lapses == 0 && self.rng.random_bool(0.05);
        // A repeat of a 1 ms lease's grant would be decided by how long the two sends took on
        // each store (the first lease lapsed or not), not by the rule.
        let repeated = !short && self.rng.random_bool(0.15);
        Call::Acquire {
            actor,
            target,
            ask,
            short,
            repeated,
        }
    }

    fn apply(&mut self, call: &Call) {
        let (mut store, mut model) = self.sides();
        let touched = match call {
            Call::Acquire {
                actor,
                target,
                ask,
                short,
                repeated,
            } => {
                let ttl = Ttl::new(if *short { SHORT } else { LONG }).expect("a valid TTL");
                let sends = if *repeated { 2 } else { 1 };
                let granted_before = store.granted.len();
                for send in 0..sends {
                    let ours = store.acquire(self, *actor, target, *ask, ttl);
                    let theirs = model.acquire(self, *actor, target, *ask, ttl);
                    let decision = |answer: &Result<Acquisitions>| match answer {
                        Ok(Acquisitions::Acquired(_)) => Ok("granted".to_owned()),
                        Ok(Acquisitions::Locked { ticket, position }) => Ok(format!(
                            "refused, {} ticket, {} ahead",
                            if ticket.is_some() { "with a" } else { "no" },
                            position.map_or("no place".to_owned(), |p| format!("{p} places")),
                        )),
                        Err(error) => Err(error.to_string()),
                    };
                    self.agree(
                        &format!("answer to send {send}"),
                        decision(&ours),
                        decision(&theirs),
                        &store,
                    );
                }
                if *short && store.granted.len() > granted_before {
                    self.lapses += 1;
                    let new = granted_before..store.granted.len();
                    wait_until("a 1 ms lease to lapse on both", EXPIRY_DEADLINE, || {
                        new.clone()
                            .all(|index| store.lapsed(self, index) && model.lapsed(self, index))
                    });
                }
                target.keys()
            }
            Call::Release(index) | Call::Extend(index) => {
                let renew = matches!(call, Call::Extend(_));
                let ours = store.settle(self, *index, renew);
                let theirs = model.settle(self, *index, renew);
                let applied = |answer: Result<bool>| answer.map_err(|error| error.to_string());
                self.agree("applied", applied(ours), applied(theirs), &store);
                store.granted[*index].keys.clone()
            }
            Call::Leave { actor, role, key } => {
                let ours = store.leave(self, *actor, *role, *key);
                let theirs = model.leave(self, *actor, *role, *key);
                let left = |answer: Result<()>| answer.map_err(|error| error.to_string());
                self.agree("left", left(ours), left(theirs), &store);
                vec![*key]
            }
        };
        for key in touched {
            let ours = store.state(self, key).map_err(|error| error.to_string());
            let theirs = model.state(self, key).map_err(|error| error.to_string());
            self.agree(&format!("key {key} afterwards"), ours, theirs, &store);
        }
        self.store = Some(store);
        self.model = Some(model);
    }

    /// Fails, with the seed and the calls so far, unless the store and the model agree.
    fn agree<T: std::fmt::Debug + PartialEq>(
        &self,
        what: &str,
        ours: T,
        theirs: T,
        store: &Side<'_>,
    ) {
        assert!(
            ours == theirs,
            "{} and the model disagree on the {what} of call {}:\n  {}: {ours:?}\n  model: \
             {theirs:?}\nreplay with SYNCGUARD_DIFFERENTIAL_SEED={} (this sequence's seed, replayed first); the \
             calls:\n  {}",
            store.name,
            self.log.len(),
            store.name,
            self.seed,
            self.log.join("\n  ")
        );
    }
}
