//! PostgreSQL errors → [`LockError`], by SQLSTATE (the SyncGuard mapping table).

use std::io;

use postgres::error::SqlState;

use crate::error::{ErrorCode, LockError};
use crate::net::Redactor;

/// The code for a client or server error.
pub(crate) fn classify(error: &postgres::Error) -> ErrorCode {
    if let Some(state) = error.code() {
        return classify_state(state);
    }
    if error.is_closed() {
        return ErrorCode::ServiceUnavailable;
    }
    match io_kind(error) {
        Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => ErrorCode::NetworkTimeout,
        Some(_) => ErrorCode::ServiceUnavailable,
        // Connect timeouts and TLS failures carry no io::Error, only text.
        None => {
            let text = error.to_string().to_ascii_lowercase();
            if text.contains("timeout") || text.contains("timed out") {
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
        // undefined_table / undefined_column / undefined_function: the schema is missing or old.
        "42P01" | "42703" | "42883" => ErrorCode::InvalidArgument,
        // serialization_failure, deadlock_detected: transient conflicts.
        "40001" | "40P01" => ErrorCode::ServiceUnavailable,
        // admin_shutdown, crash_shutdown, cannot_connect_now.
        "57P01" | "57P02" | "57P03" => ErrorCode::ServiceUnavailable,
        _ => match &code[..2] {
            // connection_exception, insufficient_resources (too many connections, disk full),
            // operator_intervention, system_error.
            "08" | "53" | "57" | "58" => ErrorCode::ServiceUnavailable,
            // data_exception, integrity_constraint_violation.
            "22" | "23" => ErrorCode::InvalidArgument,
            _ => ErrorCode::Internal,
        },
    }
}

fn io_kind(error: &postgres::Error) -> Option<io::ErrorKind> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        source = cause.source();
    }
    None
}

/// Whether a failed call may be made once more on a fresh connection: the pooled connection was
/// already closed (a restarted server). Timeouts never qualify.
pub(crate) fn is_dead_connection(error: &postgres::Error) -> bool {
    error.code().is_none()
        && (error.is_closed()
            || matches!(
                io_kind(error),
                Some(
                    io::ErrorKind::BrokenPipe
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::NotConnected
                )
            ))
}

/// The `LockError` for a failed PostgreSQL call, secrets removed.
pub(crate) fn map_error(error: postgres::Error, redactor: &Redactor) -> LockError {
    let code = classify(&error);
    let state = error.code().map(SqlState::code);
    let what = match (code, state) {
        (_, Some("42P01" | "42703" | "42883")) => {
            "the syncguard tables are missing or outdated: run syncguard::postgres::setup_schema \
             (or apply schema.sql) with the table names this backend uses"
        }
        (ErrorCode::NetworkTimeout, Some(_)) => {
            "PostgreSQL cancelled the statement (statement_timeout)"
        }
        (ErrorCode::NetworkTimeout, None) => "PostgreSQL did not answer in time",
        (ErrorCode::AuthFailed, _) => "PostgreSQL rejected the credentials or permissions",
        (ErrorCode::ServiceUnavailable, _) => "PostgreSQL is unavailable",
        (ErrorCode::InvalidArgument, _) => "PostgreSQL rejected the request",
        _ => "PostgreSQL request failed",
    };
    let source = redactor.source(&error);
    let detail = match error.as_db_error() {
        // The server's own message is short and specific; the client's Display adds noise.
        Some(db) => redactor.clean(db.message()),
        None => source.0.clone(),
    };
    let message = match state {
        Some(state) => format!("{what}: {detail} (SQLSTATE {state})"),
        None => format!("{what}: {detail}"),
    };
    LockError::new(code, message).with_source(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_by_the_table() {
        let cases = [
            (
                SqlState::CONNECTION_EXCEPTION,
                ErrorCode::ServiceUnavailable,
            ),
            (SqlState::CONNECTION_FAILURE, ErrorCode::ServiceUnavailable),
            (SqlState::INVALID_PASSWORD, ErrorCode::AuthFailed),
            (
                SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                ErrorCode::AuthFailed,
            ),
            (SqlState::INSUFFICIENT_PRIVILEGE, ErrorCode::AuthFailed),
            (
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                ErrorCode::InvalidArgument,
            ),
            (SqlState::UNIQUE_VIOLATION, ErrorCode::InvalidArgument),
            (SqlState::QUERY_CANCELED, ErrorCode::NetworkTimeout),
            (
                SqlState::TOO_MANY_CONNECTIONS,
                ErrorCode::ServiceUnavailable,
            ),
            (SqlState::ADMIN_SHUTDOWN, ErrorCode::ServiceUnavailable),
            (
                SqlState::T_R_SERIALIZATION_FAILURE,
                ErrorCode::ServiceUnavailable,
            ),
            (SqlState::UNDEFINED_TABLE, ErrorCode::InvalidArgument),
            (SqlState::SYNTAX_ERROR, ErrorCode::Internal),
        ];
        for (state, code) in cases {
            assert_eq!(classify_state(&state), code, "{}", state.code());
        }
    }
}
