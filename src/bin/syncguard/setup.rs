//! `syncguard setup`: creates the PostgreSQL tables; the other backends need none.

use serde_json::json;

use crate::outcome::Outcome;
use crate::url::scheme;

/// `setup`: creates the PostgreSQL tables; the other backends need nothing, which it says.
pub fn setup(url: &str) -> syncguard::Result<Outcome> {
    if matches!(scheme(url).as_str(), "postgres" | "postgresql") {
        return setup_postgres(url);
    }
    // Still a check that the URL is one this build can use.
    let backend = syncguard::connect(url)?;
    eprintln!(
        "syncguard: the {} backend needs no setup; nothing to do",
        backend.capabilities().backend
    );
    Ok(Outcome::Printed(json!({ "ok": true }), 0))
}

// The `cli` feature brings every backend, PostgreSQL's among them.
fn setup_postgres(url: &str) -> syncguard::Result<Outcome> {
    syncguard::postgres::PostgresBackend::connect(url.trim())?.setup_schema()?;
    Ok(Outcome::Printed(json!({ "ok": true }), 0))
}
