//! What a PostgreSQL URL says ([`parse_url`]: the client's configuration, the table names,
//! TLS and its CA file) and the TLS connector of syncguard's own connections.

use std::path::{Path, PathBuf};

use tokio_postgres::Config;

use super::errors::chain;
use crate::error::{LockError, Result};
use crate::net::{Redactor, UrlParams, split_url};
use crate::tls::TlsRoots;

/// A PostgreSQL URL taken apart.
pub(crate) struct ParsedUrl {
    pub config: Config,
    pub tls: bool,
    /// `sslrootcert=PATH`: CA certificates to trust besides the system's.
    pub ca_file: Option<PathBuf>,
    pub display: String,
    pub secrets: Vec<String>,
    pub lock_table: Option<String>,
    pub fence_table: Option<String>,
}

/// Parses `postgres://` / `postgresql://` URLs. syncguard's own options (`table`,
/// `fence_table`), `sslmode` and `sslrootcert` are taken out: `sslmode=require`, `verify-ca` or
/// `verify-full` mean TLS with full certificate verification; anything else, or none, means no
/// TLS. `sslrootcert=PATH` adds a PEM file of CA certificates to the system's roots
/// (`sslrootcert=system`, libpq's name for the system's roots, adds nothing); it needs TLS.
pub(crate) fn parse_url(url: &str) -> Result<ParsedUrl> {
    let split = split_url(
        url,
        "PostgreSQL",
        &UrlParams {
            ours: &["table", "fence_table", "sslmode", "sslrootcert"],
            // What tokio-postgres reads from a URL's query.
            client: &[
                "user",
                "password",
                "dbname",
                "options",
                "application_name",
                "host",
                "hostaddr",
                "port",
                "connect_timeout",
                "tcp_user_timeout",
                "keepalives",
                "keepalives_idle",
                "keepalives_interval",
                "keepalives_retries",
                "target_session_attrs",
                "channel_binding",
                "load_balance_hosts",
            ],
        },
    )?;
    let scheme = split.url.scheme();
    if !matches!(scheme, "postgres" | "postgresql") {
        return Err(LockError::invalid_argument(format!(
            "not a PostgreSQL URL (scheme {scheme:?}); expected postgres:// or postgresql://"
        )));
    }
    let redactor = Redactor::new(split.secrets.clone());
    let config: Config = split
        .url
        .as_str()
        .parse()
        .map_err(|e: tokio_postgres::Error| {
            LockError::invalid_argument(format!(
                "malformed PostgreSQL URL: {}",
                redactor.clean(&chain(&e))
            ))
        })?;
    // Percent-decoded as libpq does (a `+` stays a plus sign), as the client's own parameters
    // are.
    let option = |name: &str| {
        split
            .raw_options
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| percent_encoding::percent_decode_str(value).decode_utf8_lossy())
            .map(|value| value.into_owned())
    };
    let tls = match option("sslmode").as_deref() {
        None | Some("disable" | "allow" | "prefer") => false,
        Some("require" | "verify-ca" | "verify-full") => true,
        Some(_) => {
            return Err(LockError::invalid_argument(
                "unknown sslmode: expected disable, allow, prefer, require, verify-ca or verify-full",
            ));
        }
    };
    let ca_file = match option("sslrootcert") {
        Some(path) if path == "system" => None,
        Some(_) if !tls => {
            return Err(LockError::invalid_argument(
                "the PostgreSQL URL gives sslrootcert but no TLS: add sslmode=verify-full",
            ));
        }
        Some(path) => Some(PathBuf::from(path)),
        None => None,
    };
    Ok(ParsedUrl {
        config,
        tls,
        ca_file,
        display: split.display,
        secrets: split.secrets,
        lock_table: option("table"),
        fence_table: option("fence_table"),
    })
}

/// The TLS connector of syncguard's own connections: the shared policy of [`crate::tls`]
/// (the system's roots plus `ca_file`, *ring* chosen explicitly, so the application's
/// process-wide rustls setup is neither read nor changed).
pub(crate) fn rustls_connector(
    ca_file: Option<&Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    let roots = TlsRoots::load(ca_file, true)?;
    roots.require_any("sslrootcert (or tls_ca_file)")?;
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(
        roots.client_config()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_our_options_apart() {
        let parsed = parse_url(
            "postgres://app:pw@db.internal:5433/locks?table=a_locks&fence_table=a_fences&sslmode=require&application_name=job",
        )
        .unwrap();
        assert!(parsed.tls);
        assert_eq!(parsed.lock_table.as_deref(), Some("a_locks"));
        assert_eq!(parsed.fence_table.as_deref(), Some("a_fences"));
        assert_eq!(parsed.config.get_dbname(), Some("locks"));
        assert_eq!(parsed.config.get_application_name(), Some("job"));
        assert!(!parsed.display.contains("pw"), "{}", parsed.display);
        assert!(!parse_url("postgresql://localhost/db").unwrap().tls);
        assert!(parse_url("postgres://localhost/db?sslmode=bogus").is_err());
        assert!(parse_url("mysql://localhost/db").is_err());
        let parsed =
            parse_url("postgres://h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem").unwrap();
        assert_eq!(parsed.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        // libpq's name for the system's roots, which are trusted anyway.
        let parsed = parse_url("postgres://h/db?sslmode=require&sslrootcert=system").unwrap();
        assert_eq!(parsed.ca_file, None);
        assert!(parse_url("postgres://h/db?sslmode=disable&sslrootcert=/etc/ca.pem").is_err());
    }

    /// As libpq reads a URL: percent-decoded, and `+` is a plus sign, not a space.
    #[test]
    fn parameters_are_decoded_as_libpq_decodes_them() {
        let parsed = parse_url(
            "postgres://h/db?options=-c%20search_path%3Dx&application_name=a+b%20c\
             &sslmode=require&sslrootcert=/etc/a+b%20c.pem",
        )
        .unwrap();
        assert_eq!(parsed.config.get_options(), Some("-c search_path=x"));
        assert_eq!(parsed.config.get_application_name(), Some("a+b c"));
        assert_eq!(parsed.ca_file.as_deref(), Some(Path::new("/etc/a+b c.pem")));
        let parsed = parse_url("postgres://u:p%2Bw@h/db?password=x+y").unwrap();
        assert_eq!(parsed.config.get_password(), Some(&b"x+y"[..]));
        assert!(!parsed.display.contains("x+y"), "{}", parsed.display);
    }
}
