//! Leader election among replicas: run this program several times on one name, and one copy
//! at a time leads. The leader works (here: a `tick` line every 100 ms) while its token is not
//! cancelled; when it dies or is cut off, another copy is elected with a higher term once its
//! lease has ended — and the old leader's work was told to stop a margin before that.
//!
//! ```text
//! SYNCGUARD_URL=redis://127.0.0.1/ cargo run --features redis --example leader -- reports node-a
//! SYNCGUARD_URL=redis://127.0.0.1/ cargo run --features redis --example leader -- reports node-b
//! ```
//!
//! Each line it prints is `<unix ms> <event> term=<term> value=<value>`, with the events
//! `start` (elected), `tick` (working) and `stop` (the work's token was cancelled). Pass the
//! term to whatever the leader writes, and have that store refuse a term lower than the last
//! it accepted: the term is the leadership's fencing token.

use std::io::Write;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use syncguard::driver::Driver;
use syncguard::{LeadOptions, LockError, Locker};

/// How often the leader's work logs a tick.
const TICK: Duration = Duration::from_millis(100);

fn main() -> Result<(), LockError> {
    let url = std::env::var("SYNCGUARD_URL").unwrap_or_else(|_| "memory:".to_owned());
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "leader-example".to_owned());
    let value = args
        .next()
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    let locker = campaigner(syncguard::connect(&url)?);
    lead(&locker, &name, &value, &mut std::io::stdout())
}

/// A locker for campaigning: the defaults. (The first campaigner in line tries every few tens
/// of ms, so a lease that simply expired — nobody announces that — is taken over soon after.)
pub fn campaigner<B: Driver + 'static>(backend: B) -> Locker<B> {
    Locker::new(backend)
}

/// Leads `name` with `value` until the process ends: a 3 s lease renewed every second, the
/// work told to stop a second before the lease could end. Logs each event to `log`.
pub fn lead<B: Driver + 'static>(
    locker: &Locker<B>,
    name: &str,
    value: &str,
    log: &mut impl Write,
) -> Result<(), LockError> {
    let options = LeadOptions::default()
        .ttl(Duration::from_secs(3))
        .renew_every(Duration::from_secs(1))
        .margin(Duration::from_secs(1));
    locker.lead(name, value, &options, |leadership, cancelled| {
        let term = leadership.term().value();
        let mut event = |what: &str| {
            let line = format!("{} {what} term={term} value={value}\n", unix_ms());
            // One write per line: a process killed mid-run leaves whole lines behind.
            log.write_all(line.as_bytes())
                .and_then(|()| log.flush())
                .map_err(|e| LockError::internal(format!("writing the log: {e}")))
        };
        event("start")?;
        while !cancelled.is_cancelled() {
            event("tick")?;
            thread::sleep(TICK);
        }
        event("stop")
    })
}

/// This machine's clock, in Unix ms.
fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis())
}
