//! The contract suite every backend passes, shipped for backends written elsewhere (feature
//! `testing`).
//!
//! Three macros expand to one `#[test]` per contract, each on a fresh backend from a factory:
//! [`backend_contract!`](crate::backend_contract) for what a [`LockBackend`](crate::LockBackend)
//! promises (atomic acquisition, fences, expiry, ownership, idempotency, lookups, validation),
//! [`guard_contract!`](crate::guard_contract) for what a [`Locker`](crate::Locker) and its
//! guards promise on top of it (release on drop, the heartbeat, loss reporting, waiting), and
//! [`semaphore_contract!`](crate::semaphore_contract) for semaphores (at most N holders, fences
//! of their own, reclaim after expiry, loss, idempotent release, validation), for a backend
//! that has them. The bundled backends run exactly this suite.
//!
//! ```ignore
//! // tests/contract.rs of a crate with a backend `my_store::MyBackend`, with
//! // `syncguard = { version = "…", features = ["testing"] }` in its dev-dependencies:
//! fn backend() -> my_store::MyBackend {
//!     my_store::MyBackend::connect(&std::env::var("MY_STORE_URL").unwrap()).unwrap()
//! }
//!
//! syncguard::backend_contract!(backend);
//! syncguard::guard_contract!(backend);
//! syncguard::semaphore_contract!(backend); // if it has semaphores
//! ```
//!
//! A backend that breaks locks runs `break_contract!` (an operator's forced release).
//!
//! A backend with semaphores, a shared mode and a line also runs `line_contract!`,
//! `shared_contract!`, `multi_contract!` and [`lost_answer_contract!`](crate::lost_answer_contract):
//! every kind of acquisition with answers lost and calls repeated at every step by a
//! [`nemesis::Nemesis`], and the rule of the line compared with the in-memory store's.
//!
//! A second deployment of a store whose own setup runs the full suites (a Redis Cluster or
//! Sentinel beside a single server, a pooler in front of PostgreSQL) can run
//! `guard_contract!(topology: f)`, `line_contract!(topology: f)` and
//! `shared_contract!(topology: f)`: every contract but the few that wait out the store's own
//! timing logic for seconds (a `min_hold`, a `max_hold`, a short lease, a dead waiter's place),
//! which do the same thing on every deployment of one store.
//!
//! Backends may share one live server with other tests and earlier runs: every contract works on
//! keys of its own and never assumes an empty store. Waiting is polling a condition with a
//! generous deadline, never a bare sleep, and no assertion depends on how long anything took.
//! The contracts are also public functions ([`backend`], [`guard`], [`semaphore`]) for a test that needs
//! a setup of its own; what they share (TTLs, unique keys, waiting, assertions) is in
//! [`support`], and the guard contracts' test double in [`recorder`]. Capacity checks (what a
//! store holds at once), which test a store's layout rather than its deployment and are slow on
//! document stores, are in [`capacity`]: call them once per store. Every public function of
//! `backend` and `guard` is a contract the macros run (a test in this module checks it).

pub mod backend;
pub mod breaking;
pub mod capacity;
pub mod guard;
pub mod leadership;
pub mod line;
pub mod lost_answer;
pub mod multi;
pub mod nemesis;
pub mod observed;
pub mod recorder;
pub mod semaphore;
pub mod shared;
pub mod support;
pub mod watch;

/// Expands to a module `backend_contract` with one `#[test]` per contract function above, each
/// calling `($factory)()` for a fresh backend. The factory expression is evaluated in the
/// invoking module (through a function `backend_contract_factory` defined there), so relative
/// paths such as `super::make_backend` work; invoke it at most once per module.
#[macro_export]
macro_rules! backend_contract {
    ($factory:expr) => {
        $crate::__contract_tests!(backend: $factory);
    };
}

/// Expands to a module `guard_contract` with one `#[test]` per guard contract function, each
/// on a fresh backend from `$factory`. As with `backend_contract!`, the factory is evaluated in
/// the invoking module (through `guard_contract_factory`), so relative paths work; invoke it at
/// most once per module.
#[macro_export]
macro_rules! guard_contract {
    (topology: $factory:expr) => {
        $crate::__contract_tests!(guard_topology: $factory);
    };
    ($factory:expr) => {
        $crate::__contract_tests!(guard: $factory);
    };
}

/// Expands to a module `line_contract` with one `#[test]` per [`line`](mod@line) contract (waiting in
/// arrival order), each on a fresh backend from `$factory`: for a backend with a line
/// ([`Driver::find_line`](crate::driver::Driver::find_line)) and semaphores. As with
/// `backend_contract!`, the factory is evaluated in the invoking module (through
/// `line_contract_factory`); invoke it at most once per module.
#[macro_export]
macro_rules! line_contract {
    (topology: $factory:expr) => {
        $crate::__contract_tests!(line_topology: $factory);
    };
    ($factory:expr) => {
        $crate::__contract_tests!(line: $factory);
    };
}

/// Expands to a module `shared_contract` with one `#[test]` per [`shared`] contract (a key's
/// lock in shared and exclusive modes), each on a fresh backend from `$factory`: for a backend
/// with a shared mode ([`Mode::Shared`](crate::driver::Mode::Shared))
/// and a line. As with `backend_contract!`, the factory is evaluated in the invoking module
/// (through `shared_contract_factory`); invoke it at most once per module.
#[macro_export]
macro_rules! shared_contract {
    (topology: $factory:expr) => {
        $crate::__contract_tests!(shared_topology: $factory);
    };
    ($factory:expr) => {
        $crate::__contract_tests!(shared: $factory);
    };
}

/// Expands to a module `lost_answer_contract` with one `#[test]` per [`lost_answer`] contract
/// (every kind of acquisition, with answers lost and calls repeated at every step by a
/// [`nemesis::Nemesis`], and the rule of the line checked against the in-memory store's), each
/// on a fresh backend from `$factory`: for a backend with semaphores, a shared mode and a line.
/// As with `backend_contract!`, the factory is evaluated in the invoking module (through
/// `lost_answer_contract_factory`); invoke it at most once per module.
#[macro_export]
macro_rules! lost_answer_contract {
    ($factory:expr) => {
        $crate::__contract_tests!(lost_answer: $factory);
    };
}

/// Expands to a module `multi_contract` with one `#[test]` per [`multi`] contract (several keys
/// held together), each on a fresh backend from `$factory`. As with `backend_contract!`, the
/// factory is evaluated in the invoking module (through `multi_contract_factory`); invoke it at
/// most once per module.
#[macro_export]
macro_rules! multi_contract {
    ($factory:expr) => {
        $crate::__contract_tests!(multi: $factory);
    };
}

/// Expands to a module `leadership_contract` with one `#[test]` per [`leadership`] contract
/// (leader election: one leader at a time, rising terms, proclaim, resign, the `lead` loop's
/// cancellation), each on a fresh backend from `$factory`. As with `backend_contract!`, the
/// factory is evaluated in the invoking module (through `leadership_contract_factory`); invoke
/// it at most once per module.
#[macro_export]
macro_rules! leadership_contract {
    ($factory:expr) => {
        $crate::__contract_tests!(leadership: $factory);
    };
}

/// Expands to a module `semaphore_contract` with one `#[test]` per [`semaphore`] contract, each
/// on a fresh backend from `$factory`: for a backend with semaphores
/// ([`Mode::Permit`](crate::driver::Mode::Permit)). As with
/// `backend_contract!`, the factory is evaluated in the invoking module (through
/// `semaphore_contract_factory`); invoke it at most once per module.
#[macro_export]
macro_rules! semaphore_contract {
    ($factory:expr) => {
        $crate::__contract_tests!(semaphore: $factory);
    };
}

/// Expands to a module `break_contract` with one `#[test]` per [`breaking`] contract (an
/// operator's forced release: [`Locker::break_key`](crate::Locker::break_key)), each on a fresh
/// backend from `$factory`: for a backend that breaks locks
/// ([`Driver::break_leases`](crate::driver::Driver::break_leases)) and has semaphores and a
/// shared mode. As with `backend_contract!`, the factory is evaluated in the invoking module
/// (through `break_contract_factory`); invoke it at most once per module.
#[macro_export]
macro_rules! break_contract {
    ($factory:expr) => {
        $crate::__contract_tests!(breaking: $factory);
    };
}

/// Expands to a module `watch_contract` with one `#[test]` per [`watch`](mod@watch) contract
/// (following a key's state without holding it), each on a fresh backend from `$factory`: for
/// a backend with semaphores and a shared mode. As with `backend_contract!`, the factory is
/// evaluated in the invoking module (through `watch_contract_factory`); invoke it at most once
/// per module.
#[macro_export]
macro_rules! watch_contract {
    ($factory:expr) => {
        $crate::__contract_tests!(watch: $factory);
    };
}

/// What [`backend_contract!`](crate::backend_contract) and
/// [`guard_contract!`](crate::guard_contract) expand to. For each suite, its contracts; then
/// (`@tests`) a function `$factory_fn` in the invoking module that builds the backend under test
/// with `$factory`, and a module `$module` with one `#[test]` per `$name`, each calling
/// `$crate::testing::$suite::$name` on a fresh backend, passed `by_ref` (the backend contracts
/// borrow it) or `by_value` (the guard contracts take it).
#[doc(hidden)]
#[macro_export]
macro_rules! __contract_tests {
    (backend: $factory:expr) => {
        $crate::__contract_tests!(
            @tests backend, backend_contract, backend_contract_factory, $factory, by_ref;
            lifecycle,
            lookup_is_read_only,
            contention,
            racing_acquires_have_one_winner,
            racing_releases_have_one_winner,
            expiry,
            no_resurrection,
            extend_replaces_the_ttl,
            release_and_extend_are_idempotent,
            unknown_lock_ids_are_absent,
            ownership_is_by_lock_id,
            lookup_both_modes,
            lookup_helpers,
            holders_are_stored_with_their_lock,
            listing,
            fence_format_and_monotonicity,
            key_length_validation,
            keys_are_nfc_normalised,
            keys_with_special_characters,
            keys_with_nul_work,
            lock_id_validation,
            ttl_validation,
            max_ttl_is_stored_exactly,
            capabilities,
        );
    };
    (guard_topology: $factory:expr) => {
        $crate::__contract_tests!(
            @tests guard, guard_contract, guard_contract_factory, $factory, by_value;
            drop_releases,
            release_reports_and_fences_grow,
            guard_outlives_its_locker,
            without_heartbeat_the_lease_lapses,
            removed_lease_is_reported_lost,
            no_renewal_after_release,
            transient_renewal_failures_are_retried,
            failing_renewals_end_in_loss,
            guard_extend,
            contention_outcomes,
            waiter_gets_the_lock_after_release,
            cancel_aborts_the_wait,
            invalid_input_sends_nothing,
            with_lock_always_releases,
            release_errors_go_to_the_callback,
            guard_is_send,
            many_threads_one_key_through_one_locker,
            guard_debug_hides_the_lock_id,
            loss_is_reported_while_a_renewal_hangs,
            one_stuck_renewal_holds_up_no_other_lease,
            a_release_wakes_the_waiter,
            batch_renewals_answer_each_lease,
            transient_acquire_failures_are_waited_through,
            acquisitions_in_doubt_are_released,
            failed_releases_are_retried,
            min_hold_after_the_hold_and_on_loss,
            min_hold_is_validated_before_any_io,
            holder_option_is_stored_with_the_lock,
            holder_is_validated_before_any_io,
            observers_see_what_each_lease_lived_through,
        );
    };
    (guard: $factory:expr) => {
        $crate::__contract_tests!(
            @tests guard, guard_contract, guard_contract_factory, $factory, by_value;
            drop_releases,
            release_reports_and_fences_grow,
            heartbeat_keeps_a_short_lease,
            guard_outlives_its_locker,
            without_heartbeat_the_lease_lapses,
            removed_lease_is_reported_lost,
            no_renewal_after_release,
            transient_renewal_failures_are_retried,
            failing_renewals_end_in_loss,
            guard_extend,
            contention_outcomes,
            waiter_gets_the_lock_after_release,
            cancel_aborts_the_wait,
            invalid_input_sends_nothing,
            with_lock_always_releases,
            release_errors_go_to_the_callback,
            guard_is_send,
            many_threads_one_key_through_one_locker,
            guard_debug_hides_the_lock_id,
            shorter_extend_keeps_the_lease,
            loss_is_reported_while_a_renewal_hangs,
            one_stuck_renewal_holds_up_no_other_lease,
            max_hold_ends_renewals,
            a_release_wakes_the_waiter,
            batch_renewals_answer_each_lease,
            transient_acquire_failures_are_waited_through,
            acquisitions_in_doubt_are_released,
            failed_releases_are_retried,
            min_hold_keeps_an_early_release,
            min_hold_after_the_hold_and_on_loss,
            min_hold_is_validated_before_any_io,
            min_hold_outlasts_a_failed_release,
            min_hold_failed_release_ends_with_the_hold,
            min_hold_renewals_keep_the_hold_after_a_crash,
            holder_option_is_stored_with_the_lock,
            holder_is_validated_before_any_io,
            observers_see_what_each_lease_lived_through,
        );
    };
    (semaphore: $factory:expr) => {
        $crate::__contract_tests!(
            @tests semaphore, semaphore_contract, semaphore_contract_factory, $factory, by_value;
            never_more_than_n_holders,
            permit_fences_are_the_semaphores_own,
            the_lock_and_the_semaphore_of_a_key_are_apart,
            each_acquisition_is_judged_by_its_own_permits,
            expired_permits_are_reclaimed,
            permit_release_and_extend_are_idempotent,
            batch_renewals_answer_locks_and_permits_apart,
            permit_guards_renew_report_loss_and_release,
            a_waiter_gets_a_released_permit,
            min_hold_and_detach_keep_the_permit,
            holders_are_listed_in_fence_order,
            permits_are_listed_by_prefix,
            bad_permits_are_refused_before_any_io,
            permits_are_observed,
        );
    };
    (shared_topology: $factory:expr) => {
        $crate::__contract_tests!(
            @tests shared, shared_contract, shared_contract_factory, $factory, by_value;
            readers_share_and_exclude_a_writer,
            fences_order_every_grant_of_the_key,
            a_waiting_writer_is_not_starved_by_later_readers,
            readers_at_the_head_are_granted_together,
            one_readers_end_leaves_the_others,
            shared_holds_are_listed,
            shared_input_is_checked_before_any_io,
        );
    };
    (shared: $factory:expr) => {
        $crate::__contract_tests!(
            @tests shared, shared_contract, shared_contract_factory, $factory, by_value;
            readers_share_and_exclude_a_writer,
            fences_order_every_grant_of_the_key,
            a_waiting_writer_is_not_starved_by_later_readers,
            readers_at_the_head_are_granted_together,
            a_dead_waiting_writer_holds_readers_up_until_its_place_lapses,
            one_readers_end_leaves_the_others,
            shared_holds_are_listed,
            shared_input_is_checked_before_any_io,
        );
    };
    (line_topology: $factory:expr) => {
        $crate::__contract_tests!(
            @tests line, line_contract, line_contract_factory, $factory, by_value;
            waiters_are_served_in_arrival_order,
            semaphores_serve_their_line_in_order,
            a_dead_waiter_holds_the_line_up_for_place_ttl_at_most,
            a_waiter_that_gives_up_leaves_at_once,
            a_single_attempt_does_not_pass_a_live_line,
            without_the_line_an_acquisition_barges,
            a_repeated_place_is_one_place,
            only_the_first_in_line_polls_often,
            the_first_in_line_notices_an_expiry,
        );
    };
    (multi: $factory:expr) => {
        $crate::__contract_tests!(
            @tests multi, multi_contract, multi_contract_factory, $factory, by_value;
            all_or_none,
            reversed_orders_do_not_deadlock,
            losing_one_key_loses_the_set,
            released_as_a_whole,
            bad_input_is_refused_before_any_io,
            waiters_of_sets_stand_in_one_order,
            a_set_waits_its_turn_and_leaves_when_it_gives_up,
        );
    };
    (breaking: $factory:expr) => {
        $crate::__contract_tests!(
            @tests breaking, break_contract, break_contract_factory, $factory, by_value;
            a_held_lock_is_broken_whatever_its_lock_id,
            a_waiter_is_granted_when_the_delay_ends,
            no_delay_frees_the_key_at_once,
            shared_holders_are_broken_all_at_once,
            permits_are_broken_all_or_one_by_lock_id,
            nothing_live_answers_nothing_held,
            a_repeated_break_keeps_the_first_marker,
            a_break_racing_a_renewal_never_loses_the_marker,
            bad_input_is_refused_before_any_io,
            breaks_are_observed,
        );
    };
    (lost_answer: $factory:expr) => {
        $crate::__contract_tests!(
            @tests lost_answer, lost_answer_contract, lost_answer_contract_factory, $factory, by_value;
            lost_answers_on_locks,
            lost_answers_on_permits,
            lost_answers_on_shared_holds,
            lost_answers_on_sets,
            the_rule_agrees_with_the_model,
        );
    };
    (leadership: $factory:expr) => {
        $crate::__contract_tests!(
            @tests leadership, leadership_contract, leadership_contract_factory, $factory, by_value;
            one_leader_at_a_time_on_one_locker,
            one_leader_at_a_time_across_lockers,
            leader_shows_the_value_and_the_term,
            proclaim_changes_the_value_and_keeps_the_term,
            resign_and_drop_hand_over_with_a_higher_term,
            lead_work_is_cancelled_when_the_lease_is_removed,
            a_broken_leadership_shows_no_leader_and_the_next_term_is_higher,
            lead_work_stops_before_the_lease_can_end,
            leadership_input_is_checked_before_any_io,
        );
    };
    (line: $factory:expr) => {
        $crate::__contract_tests!(
            @tests line, line_contract, line_contract_factory, $factory, by_value;
            waiters_are_served_in_arrival_order,
            semaphores_serve_their_line_in_order,
            a_dead_waiter_is_skipped_when_its_place_lapses,
            a_dead_waiter_holds_the_line_up_for_place_ttl_at_most,
            a_waiter_that_gives_up_leaves_at_once,
            a_single_attempt_does_not_pass_a_live_line,
            without_the_line_an_acquisition_barges,
            a_repeated_place_is_one_place,
            only_the_first_in_line_polls_often,
            the_first_in_line_notices_an_expiry,
        );
    };
    (watch: $factory:expr) => {
        $crate::__contract_tests!(
            @tests watch, watch_contract, watch_contract_factory, $factory, by_value;
            the_first_state_is_the_current_one,
            every_state_reported_happened_in_order,
            a_release_and_an_expiry_are_reported_as_such,
            a_watch_holds_nothing_and_takes_no_place,
            wait_until_free_answers_a_release_and_a_timeout,
            permits_and_shared_holders_are_watched_by_kind,
        );
    };
    (
        @tests $suite:ident, $module:ident, $factory_fn:ident, $factory:expr, $pass:ident;
        $($name:ident),* $(,)?
    ) => {
        /// The backend under test, built in the invoking module so that the factory's paths
        /// resolve there.
        fn $factory_fn() -> impl $crate::LockBackend + 'static {
            ($factory)()
        }

        mod $module {
            $(
                #[test]
                fn $name() {
                    $crate::__contract_tests!(
                        @call $pass, $crate::testing::$suite::$name, super::$factory_fn()
                    );
                }
            )*
        }
    };
    (@call by_ref, $contract:path, $backend:expr) => {
        $contract(&$backend)
    };
    (@call by_value, $contract:path, $backend:expr) => {
        $contract($backend)
    };
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::fs;
    use std::path::Path;

    /// The public functions of a suite's files (`testing/SUITE.rs` and `testing/SUITE/*.rs`):
    /// its contracts, since helpers live in `support`.
    fn public_functions(suite: &str) -> BTreeSet<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testing");
        let mut files = vec![dir.join(format!("{suite}.rs"))];
        if let Ok(entries) = fs::read_dir(dir.join(suite)) {
            files.extend(entries.map(|entry| entry.unwrap().path()));
        }
        let mut names = BTreeSet::new();
        for file in files {
            let source = fs::read_to_string(&file).unwrap();
            names.extend(
                source
                    .lines()
                    .filter_map(|line| line.strip_prefix("pub fn "))
                    .map(|rest| rest.split(['<', '(']).next().unwrap_or(rest).to_owned()),
            );
        }
        names
    }

    /// The contracts the macro's arm for `suite` runs: the names after its `@tests` line.
    fn listed(suite: &str) -> BTreeSet<String> {
        let source = include_str!("mod.rs");
        let arm = format!("({suite}: $factory:expr) => {{");
        let start = source
            .find(&arm)
            .expect("the macro has an arm for the suite");
        let rest = &source[start..];
        let list = &rest[rest.find(';').expect("the arm's @tests line ends") + 1..];
        let list = &list[..list.find(");").expect("the arm's list ends")];
        list.split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The topology form of a suite runs every contract of the suite but the ones that wait
    /// out a store's own timing, named here: a contract added to a suite's list and not to its
    /// topology list fails this test instead of silently not running on topologies.
    #[test]
    fn topology_forms_leave_out_only_the_timed_contracts() {
        let timed: [(&str, &[&str]); 3] = [
            (
                "guard",
                &[
                    "heartbeat_keeps_a_short_lease",
                    "shorter_extend_keeps_the_lease",
                    "max_hold_ends_renewals",
                    "min_hold_keeps_an_early_release",
                    "min_hold_outlasts_a_failed_release",
                    "min_hold_failed_release_ends_with_the_hold",
                    "min_hold_renewals_keep_the_hold_after_a_crash",
                ],
            ),
            ("line", &["a_dead_waiter_is_skipped_when_its_place_lapses"]),
            (
                "shared",
                &["a_dead_waiting_writer_holds_readers_up_until_its_place_lapses"],
            ),
        ];
        for (suite, left_out) in timed {
            let (all, part) = (listed(suite), listed(&format!("{suite}_topology")));
            let expected: BTreeSet<String> = all
                .iter()
                .filter(|name| !left_out.contains(&name.as_str()))
                .cloned()
                .collect();
            assert_eq!(part, expected, "{suite}: the topology list");
        }
    }

    /// A contract left off the macro's list would silently never run: every public function of
    /// the `backend` and `guard` suites must be listed, and nothing else.
    #[test]
    fn the_macros_run_every_contract() {
        for suite in [
            "backend",
            "guard",
            "semaphore",
            "line",
            "shared",
            "multi",
            "lost_answer",
            "breaking",
            "watch",
            "leadership",
        ] {
            let (public, listed) = (public_functions(suite), listed(suite));
            assert!(
                public.len() >= 5,
                "{suite}: no contracts read from its files"
            );
            let unlisted: Vec<_> = public.difference(&listed).collect();
            let unknown: Vec<_> = listed.difference(&public).collect();
            assert!(
                unlisted.is_empty() && unknown.is_empty(),
                "{suite}: public functions the macro does not run (list them in \
                 `__contract_tests!`, or move helpers to `support.rs`): {unlisted:?}; listed \
                 but not public functions of the suite: {unknown:?}"
            );
        }
    }
}
