//! What a store is and guarantees: [`Capabilities`], answered by
//! [`Driver::describe`](crate::driver::Driver::describe).

use crate::line::TicketOrder;

/// Which clock decides expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeAuthority {
    /// The store's own clock (Redis `TIME`, PostgreSQL `clock_timestamp()`): client clocks do
    /// not matter.
    Server,
    /// The client's clock (Firestore, memory): keep clients NTP-synchronised.
    Client,
}

/// What a backend is and guarantees.
///
/// The modes and sets a store takes natively are declared here, and the crate acts on them in
/// one place ([`acquire`](crate::driver::acquire)): a request in a mode the store lacks is
/// refused before it is sent, and a set of keys the store cannot decide in one step is taken
/// one key at a time ([`acquire_one_by_one`](crate::driver::acquire_one_by_one)). A new
/// store starts with exclusive locks of one key and declares what it adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Short backend name: `"memory"`, `"redis"`, `"postgres"`, `"firestore"`.
    pub backend: &'static str,
    /// Whether acquisitions return fencing tokens (all bundled backends do).
    pub supports_fencing: bool,
    /// Which clock decides expiry.
    pub time_authority: TimeAuthority,
    /// How the tickets of new places in line are numbered ([`TicketOrder::PerLine`] unless
    /// [`with_tickets`](Capabilities::with_tickets) says otherwise).
    pub tickets: TicketOrder,
    /// Whether it takes shared holds ([`Mode::Shared`](crate::driver::Mode::Shared)).
    pub shared_mode: bool,
    /// Whether it has semaphores ([`Mode::Permit`](crate::driver::Mode::Permit)).
    pub semaphores: bool,
    /// Whether it decides the exclusive locks of several keys in one atomic step (one script,
    /// statement or commit); otherwise they are taken one key at a time.
    pub native_sets: bool,
}

impl Capabilities {
    /// Capabilities of a backend named `backend`: exclusive locks, one key at a time.
    pub fn new(
        backend: &'static str,
        supports_fencing: bool,
        time_authority: TimeAuthority,
    ) -> Self {
        Capabilities {
            backend,
            supports_fencing,
            time_authority,
            tickets: TicketOrder::PerLine,
            shared_mode: false,
            semaphores: false,
            native_sets: false,
        }
    }

    /// These capabilities, with shared holds, semaphores and sets of keys decided in one step:
    /// what every bundled backend has.
    pub fn with_every_mode(self) -> Self {
        Capabilities {
            shared_mode: true,
            semaphores: true,
            native_sets: true,
            ..self
        }
    }

    /// These capabilities with new places' tickets numbered by `tickets`.
    pub fn with_tickets(mut self, tickets: TicketOrder) -> Self {
        self.tickets = tickets;
        self
    }
}
