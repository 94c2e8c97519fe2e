//! What is particular to locks in Firestore: the emulator or a real project and its
//! credentials, the documents a lock is made of, the requests each operation costs, and the
//! client clock that decides expiry (and how far off it is).
//!
//! ```text
//! # Google's emulator (the Cloud SDK's cloud-firestore-emulator component):
//! gcloud emulators firestore start --host-port=127.0.0.1:8080 &
//! FIRESTORE_EMULATOR_HOST=127.0.0.1:8080 cargo run --example firestore
//!
//! # A real project, with Google's Application Default Credentials: a credentials file
//! # (service account, `gcloud auth application-default login`, Workload Identity Federation),
//! # else gcloud's own file, else the metadata server of GCE / Cloud Run / GKE:
//! GOOGLE_APPLICATION_CREDENTIALS=creds.json GOOGLE_CLOUD_PROJECT=my-project cargo run --example firestore
//! ```
//!
//! What every backend shares (waiting, fences, the heartbeat, `with_lock`) is the quickstart's
//! tour, which runs against Firestore as well (`FIRESTORE_EMULATOR_HOST` is honoured there too):
//! `SYNCGUARD_URL=firestore://my-project cargo run --example quickstart`.

use std::time::Duration;

use syncguard::firestore::{Credentials, FirestoreBackend};
use syncguard::{LockBackend, Locker};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {}: {}", error.code(), error.message());
        std::process::exit(1);
    }
}

fn run() -> syncguard::Result<()> {
    let project =
        std::env::var("GOOGLE_CLOUD_PROJECT").unwrap_or_else(|_| "syncguard-example".into());

    // `FirestoreBackend::connect("firestore://PROJECT[/DATABASE]?credentials=key.json")` takes
    // the defaults; the builder sets the rest: `timeout` bounds each HTTP request, connecting
    // included. Firestore keeps no time for us, so this machine's clock decides expiry:
    // `max_clock_skew` makes operations fail while that clock is known to be further off than
    // the bound, rather than cut other holders' leases short or keep its own too long.
    let builder = FirestoreBackend::builder()
        .project(&project)
        .timeout(Duration::from_secs(3))
        .max_clock_skew(Duration::from_millis(500));
    // The builder picks the emulator by itself when FIRESTORE_EMULATOR_HOST is set; spelled
    // out here to show both sides.
    let (builder, endpoint) = match std::env::var("FIRESTORE_EMULATOR_HOST") {
        // Plain HTTP, and the emulator accepts any project and the token `owner`.
        Ok(host) if !host.trim().is_empty() => (builder.emulator_host(&host), host),
        // Google's endpoint, with credentials in Google's ADC order: the file
        // GOOGLE_APPLICATION_CREDENTIALS names (any supported type), gcloud's
        // application_default_credentials.json, then the metadata server of GCE, Cloud Run or
        // GKE. `Credentials::File`, `Json`, `Token` and the others choose explicitly.
        _ => (
            builder.production().credentials(Credentials::Default),
            "firestore.googleapis.com".to_owned(),
        ),
    };
    // Nothing is sent yet: a wrong endpoint or credentials show up at the first operation.
    let backend = builder.build()?;
    println!("project {project} at {endpoint}");
    println!("clock: {:?}", backend.capabilities().time_authority);

    let locker = Locker::new(backend);
    let firestore = locker.backend();
    let key = format!(
        "example:report:{}",
        &syncguard::driver::generate_lock_id()[..6]
    );

    // Every change is a compare-and-set commit with preconditions rather than a transaction
    // (under contention, transactions starve the holder's release): at most two requests.
    let sent = firestore.stats().requests;
    let guard = locker.lock(&key)?;
    println!(
        "\nlocked {key:?} with fence {} (HTTP requests: {})",
        guard.fence(),
        firestore.stats().requests - sent
    );
    // A lock is a document, its fence counter another one that is never deleted.
    println!("  locks/{}", firestore.lock_document_id(&key)?);
    println!("  fence_counters/{}", firestore.fence_document_id(&key)?);
    // Document ids cannot contain `/` (nor be `.`, `..` or `__…__`): such keys are hashed.
    println!(
        "  the key \"reports/2024\" would be locks/{}",
        firestore.lock_document_id("reports/2024")?
    );

    let sent = firestore.stats().requests;
    guard.release()?;
    println!(
        "released (HTTP requests: {})",
        firestore.stats().requests - sent
    );

    // Each answer carries Firestore's time; the offset is within ± half the round trip.
    // Above 200 ms it is logged; above `max_clock_skew` operations fail.
    match firestore.clock_skew() {
        Some(skew) => println!(
            "\nclock skew: {} ms ± {} ms (Firestore minus this machine)",
            skew.offset_ms, skew.uncertainty_ms
        ),
        None => println!("\nclock skew: not measured yet"),
    }
    // Commits that met a transaction of a TypeScript SyncGuard client are retried.
    println!("{:?}", firestore.stats());

    println!("\nnext, what every backend does:");
    println!("  SYNCGUARD_URL=firestore://{project} cargo run --example quickstart");
    Ok(())
}
