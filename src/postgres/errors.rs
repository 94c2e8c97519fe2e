//! PostgreSQL errors → [`LockError`]: the code by SQLSTATE (the SyncGuard mapping table), and a
//! message that says what went wrong and where — the cause (refused, name not resolved, TLS,
//! authentication, a pooler setting, missing tables) and the server's `host:port/database` —
//! never a password.

use std::io;

use postgres::error::SqlState;
use tokio_postgres::Config;
use tokio_postgres::config::Host;

use crate::error::{ErrorCode, LockError};
use crate::net::Redactor;

/// Where a backend's calls go, for messages: the server's address and the secrets that must
/// not appear.
#[derive(Clone, Default)]
pub(crate) struct Site {
    /// `host:port/database`; `None` for an application's pool, whose address is not known.
    location: Option<String>,
    redactor: Redactor,
}

impl Site {
    /// The site a connection configuration points at.
    pub(crate) fn of(config: &Config, redactor: Redactor) -> Site {
        let ports = config.get_ports();
        let port_of = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, host)| match host {
                Host::Tcp(name) => format!("{name}:{}", port_of(i)),
                #[cfg(unix)]
                Host::Unix(dir) => format!("{}/.s.PGSQL.{}", dir.display(), port_of(i)),
            })
            .collect();
        let hosts = if hosts.is_empty() {
            format!("localhost:{}", port_of(0))
        } else {
            hosts.join(",")
        };
        // Without a database name the server uses the user's name.
        let database = config.get_dbname().or(config.get_user()).unwrap_or("");
        Site {
            location: Some(redactor.clean(&format!("{hosts}/{database}"))),
            redactor,
        }
    }

    /// A site whose address is not known (the application's pool).
    pub(crate) fn unknown() -> Site {
        Site::default()
    }

    pub(crate) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// `"PostgreSQL at host:port/db: {what}"`.
    pub(crate) fn message(&self, what: impl std::fmt::Display) -> String {
        match &self.location {
            Some(location) => format!("PostgreSQL at {location}: {what}"),
            None => format!("PostgreSQL: {what}"),
        }
    }
}

/// What to tell an operator whose tables are missing.
const RUN_SETUP: &str = "the syncguard tables are missing or outdated: run `syncguard setup` (or \
     syncguard::postgres::setup_schema, or apply schema.sql) with the table names this backend \
     uses";

/// What to tell an operator whose tables refuse syncguard's rows.
const SCHEMA_CHANGED: &str = "the syncguard tables differ from what `syncguard setup` creates \
     (a column, a type or a constraint was added or changed), so the server refuses syncguard's \
     rows: drop what was added (or give an added column a default), or restore the type";

/// What to tell an operator whose pooler loses prepared statements.
const POOLER_STATEMENTS: &str = "prepared statements do not survive a connection pooler in \
     transaction mode (PgBouncer pool_mode = transaction, Supavisor, RDS Proxy): syncguard's own \
     connections prepare none, so a client sharing this pool or pooler does; give that client \
     pool_mode = session, or use PgBouncer 1.21+ with max_prepared_statements";

/// What to tell an operator whose pooler refuses a startup parameter.
const POOLER_STARTUP: &str = "the connection pooler refuses a startup parameter: remove it from \
     the URL (syncguard itself sends none beyond user, database and application_name), or list \
     it in PgBouncer's ignore_startup_parameters";

/// The code for a client or server error.
pub(crate) fn classify(error: &tokio_postgres::Error) -> ErrorCode {
    if let Some(db) = error.as_db_error() {
        if is_pooler_startup_refusal(db) {
            return ErrorCode::Internal;
        }
        return classify_state(db.code());
    }
    if error.is_closed() {
        return ErrorCode::ServiceUnavailable;
    }
    match io_error(error).map(io::Error::kind) {
        Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => ErrorCode::NetworkTimeout,
        Some(_) => ErrorCode::ServiceUnavailable,
        // Connect timeouts, TLS and authentication failures carry no io::Error, only text.
        None => {
            let text = chain(error).to_ascii_lowercase();
            if text.contains("password missing") || text.starts_with("authentication error") {
                ErrorCode::AuthFailed
            } else if text.contains("timeout") || text.contains("timed out") {
                ErrorCode::NetworkTimeout
            } else if text.starts_with("error connecting") || text.contains("tls") {
                ErrorCode::ServiceUnavailable
            } else {
                ErrorCode::Internal
            }
        }
    }
}

fn classify_state(state: &SqlState) -> ErrorCode {
    let code = state.code();
    match code {
        // 57014: statement_timeout (or a cancel request).
        "57014" => ErrorCode::NetworkTimeout,
        // invalid_authorization_specification, invalid_password, insufficient_privilege.
        "28000" | "28P01" | "42501" => ErrorCode::AuthFailed,
        // The deployment is wrong, not the call, and retrying will not help: tables missing or
        // outdated (undefined table / column / function), statements lost to a pooler
        // (invalid_sql_statement_name, duplicate_prepared_statement). The message says what to
        // change.
        "42P01" | "42703" | "42883" | "26000" | "42P05" => ErrorCode::Internal,
        // serialization_failure, deadlock_detected, lock_not_available (the role's
        // lock_timeout): transient conflicts. read_only_sql_transaction: a standby, or a
        // primary being demoted, during a failover.
        "40001" | "40P01" | "55P03" | "25006" => ErrorCode::ServiceUnavailable,
        // The class is the first two characters; a code too short for one, or not ASCII (a
        // server or pooler can send anything), has none and falls to the default.
        _ => match code.get(..2) {
            // connection_exception (PgBouncer reports its own transient failures as 08P01),
            // insufficient_resources (too many connections, disk full), operator_intervention
            // (shutdowns), system_error.
            Some("08" | "53" | "57" | "58") => ErrorCode::ServiceUnavailable,
            // Everything else, a missing database (3D000) among them. Data exceptions (22)
            // and integrity constraint violations (23) too: every value syncguard writes was
            // checked before any I/O, so the server refusing one means the tables differ from
            // what setup creates (a NOT NULL column or a constraint added, a type changed) —
            // never a mistake of the caller, whose InvalidArgument means "fix your call".
            _ => ErrorCode::Internal,
        },
    }
}

/// Whether the server refused a row syncguard wrote, or read one of an unexpected type: data
/// exceptions, integrity constraint violations, a column of another type (42804), an
/// `ON CONFLICT` without its unique index (42P10).
fn is_schema_change(state: &str) -> bool {
    state.starts_with("22") || state.starts_with("23") || matches!(state, "42804" | "42P10")
}

/// PgBouncer's answer to a startup parameter it does not know (`options`, say): SQLSTATE 08P01,
/// which it also uses for transient failures, so the text decides.
fn is_pooler_startup_refusal(db: &tokio_postgres::error::DbError) -> bool {
    db.code() == &SqlState::PROTOCOL_VIOLATION && db.message().contains("startup parameter")
}

fn io_error(error: &tokio_postgres::Error) -> Option<&io::Error> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return Some(io);
        }
        source = cause.source();
    }
    None
}

/// The error and its causes on one line: `error connecting to server: Connection refused …`.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.ends_with(&next) {
            text = format!("{text}: {next}");
        }
        source = cause.source();
    }
    text
}

/// What went wrong, in the operator's terms.
fn cause(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let state = db.code().code();
        let server_said = format!("{} (SQLSTATE {state})", db.message());
        return match state {
            "42P01" | "42703" | "42883" => format!("{RUN_SETUP} ({server_said})"),
            "26000" | "42P05" => format!("{POOLER_STATEMENTS} ({server_said})"),
            _ if is_pooler_startup_refusal(db) => format!("{POOLER_STARTUP} ({server_said})"),
            "57014" => format!("the server cancelled the statement ({server_said})"),
            "3D000" => format!("{server_said}: check the database name in the URL"),
            _ if is_schema_change(state) => {
                let mut place = String::new();
                if let Some(table) = db.table() {
                    place.push_str(&format!(" table \"{table}\""));
                }
                if let Some(column) = db.column() {
                    place.push_str(&format!(" column \"{column}\""));
                }
                if let Some(constraint) = db.constraint() {
                    place.push_str(&format!(" constraint \"{constraint}\""));
                }
                let place = if place.is_empty() {
                    String::new()
                } else {
                    format!(" (at{place})")
                };
                format!("{SCHEMA_CHANGED}{place}: {server_said}")
            }
            _ => server_said,
        };
    }
    let text = chain(error);
    if let Some(io) = io_error(error) {
        if io.kind() == io::ErrorKind::ConnectionRefused {
            return format!("connection refused ({io})");
        }
        if io.to_string().contains("lookup address") {
            return format!("host name not resolved ({io})");
        }
    }
    if let Some(tls) = crate::tls::find_rustls_error(error) {
        return format!(
            "TLS handshake failed: {}",
            crate::tls::describe(tls, "sslrootcert file (or tls_ca_file)")
        );
    }
    if text.starts_with("error performing TLS handshake") {
        return text.replacen("error performing TLS handshake", "TLS handshake failed", 1);
    }
    if text.contains("password missing") {
        return "the server asks for a password and the URL gives none".to_owned();
    }
    text
}

/// The `LockError` for a failed PostgreSQL call, secrets removed. Its source is a
/// [`ServerError`].
pub(crate) fn map_error(error: &tokio_postgres::Error, site: &Site) -> LockError {
    let code = classify(error);
    let message = site.redactor().clean(&site.message(cause(error)));
    let source = ServerError {
        text: site.redactor().clean(&chain(error)),
        state: error.code().cloned(),
        unanswered: error.as_db_error().is_none()
            && (error.is_closed() || io_error(error).is_some()),
    };
    LockError::new(code, message).with_source(source)
}

/// `error` marked as a call that was sent (or may have been) and got no answer: a timeout, a
/// connection lost mid-call. What the server did with it is unknown.
pub(crate) fn unanswered(error: LockError) -> LockError {
    let text = error.message().to_owned();
    error.with_source(ServerError {
        text,
        state: None,
        unanswered: true,
    })
}

/// What the PostgreSQL client reported, redacted: the `source` of the `LockError`s this backend
/// returns, so that the backend can tell a SQLSTATE from the error it returned.
#[derive(Debug)]
pub(crate) struct ServerError {
    text: String,
    state: Option<SqlState>,
    /// The call may have reached the server, but no answer came back: the connection broke or
    /// the deadline passed. (A server's error is an answer: its transaction was rolled back.)
    unanswered: bool,
}

impl ServerError {
    /// Whether `error` is a call that got no answer (see [`unanswered`]): it may have been
    /// carried out.
    pub(crate) fn is_unanswered(error: &LockError) -> bool {
        std::error::Error::source(error)
            .and_then(|source| source.downcast_ref::<ServerError>())
            .is_some_and(|server| server.unanswered)
    }

    /// The SQLSTATE behind `error`, if the server sent one.
    pub(crate) fn state_of(error: &LockError) -> Option<&SqlState> {
        std::error::Error::source(error)?
            .downcast_ref::<ServerError>()?
            .state
            .as_ref()
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for ServerError {}

/// Whether a failed call may be made once more on a fresh connection: the pooled connection was
/// already closed (a restarted server). Timeouts never qualify.
pub(crate) fn is_dead_connection(error: &tokio_postgres::Error) -> bool {
    error.code().is_none()
        && (error.is_closed()
            || matches!(
                io_error(error).map(io::Error::kind),
                Some(
                    io::ErrorKind::BrokenPipe
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::NotConnected
                )
            ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_by_the_table() {
        use ErrorCode::*;
        let cases = [
            (SqlState::CONNECTION_EXCEPTION, ServiceUnavailable),
            (SqlState::CONNECTION_FAILURE, ServiceUnavailable),
            (SqlState::PROTOCOL_VIOLATION, ServiceUnavailable),
            (SqlState::INVALID_PASSWORD, AuthFailed),
            (SqlState::INVALID_AUTHORIZATION_SPECIFICATION, AuthFailed),
            (SqlState::INSUFFICIENT_PRIVILEGE, AuthFailed),
            (SqlState::NUMERIC_VALUE_OUT_OF_RANGE, Internal),
            (SqlState::UNIQUE_VIOLATION, Internal),
            (SqlState::NOT_NULL_VIOLATION, Internal),
            (SqlState::CHECK_VIOLATION, Internal),
            (SqlState::STRING_DATA_RIGHT_TRUNCATION, Internal),
            (SqlState::DATATYPE_MISMATCH, Internal),
            (SqlState::LOCK_NOT_AVAILABLE, ServiceUnavailable),
            (SqlState::READ_ONLY_SQL_TRANSACTION, ServiceUnavailable),
            (SqlState::QUERY_CANCELED, NetworkTimeout),
            (SqlState::TOO_MANY_CONNECTIONS, ServiceUnavailable),
            (SqlState::ADMIN_SHUTDOWN, ServiceUnavailable),
            (SqlState::T_R_SERIALIZATION_FAILURE, ServiceUnavailable),
            (SqlState::UNDEFINED_TABLE, Internal),
            (SqlState::UNDEFINED_COLUMN, Internal),
            (SqlState::INVALID_SQL_STATEMENT_NAME, Internal),
            (SqlState::DUPLICATE_PSTATEMENT, Internal),
            (SqlState::INVALID_CATALOG_NAME, Internal),
            (SqlState::SYNTAX_ERROR, Internal),
        ];
        for (state, code) in cases {
            assert_eq!(classify_state(&state), code, "{}", state.code());
            assert!(!code.is_transient() || !matches!(state.code(), "26000" | "42P05"));
        }
    }

    /// A SQLSTATE comes from the peer as text: one too short for a class, or with characters
    /// of several bytes where the class would end, is `Internal` and never panics.
    #[test]
    fn short_or_non_ascii_sqlstates_never_panic() {
        for code in [
            "",
            "4",
            "0",
            "é",
            "é1",
            "1é",
            "€",
            "€0801",
            "ø8P01",
            "0\u{301}8",
        ] {
            assert_eq!(
                classify_state(&SqlState::from_code(code)),
                ErrorCode::Internal,
                "{code:?}"
            );
        }
        // A class followed by anything still counts.
        assert_eq!(
            classify_state(&SqlState::from_code("08é")),
            ErrorCode::ServiceUnavailable
        );
    }

    #[test]
    fn sites_name_host_port_and_database_never_the_password() {
        let config: Config = "postgres://app:hunter2@db.internal:5433/locks"
            .parse()
            .unwrap();
        let site = Site::of(&config, Redactor::new(["hunter2".to_owned()]));
        assert_eq!(
            site.message("connection refused"),
            "PostgreSQL at db.internal:5433/locks: connection refused"
        );
        let config: Config = "postgres://app@h1,h2:6000/".parse().unwrap();
        assert_eq!(
            Site::of(&config, Redactor::default()).message("x"),
            "PostgreSQL at h1:5432,h2:6000/app: x"
        );
        assert_eq!(Site::unknown().message("x"), "PostgreSQL: x");
    }

    /// Short passwords are not searched for in the text; long ones are, and URLs lose theirs.
    #[test]
    fn sites_and_messages_keep_their_words_whatever_the_password() {
        for password in ["s", "a", "er", "postgres", "locks"] {
            let url = format!("postgres://postgres:{password}@db.internal:5433/locks");
            let config: Config = url.parse().unwrap();
            let site = Site::of(&config, Redactor::new([password.to_owned()]));
            let said = "password authentication failed for user \"postgres\"";
            assert_eq!(
                site.redactor().clean(&site.message(said)),
                format!("PostgreSQL at db.internal:5433/locks: {said}")
            );
            assert_eq!(
                site.redactor().clean(&format!("bad {url}")),
                "bad postgres://postgres:***@db.internal:5433/locks"
            );
        }
        let long = "correct-horse-battery-staple";
        let config: Config = format!("postgres://app:{long}@h/db").parse().unwrap();
        let site = Site::of(&config, Redactor::new([long.to_owned()]));
        assert_eq!(
            site.redactor().clean(&format!("echoed {long} here")),
            "echoed *** here"
        );
    }
}
