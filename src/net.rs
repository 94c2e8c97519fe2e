//! What every network backend shares: keeping secrets out of messages, and the rule for
//! repeating a call whose pooled connection turned out to be dead.

#[cfg(feature = "redis")]
use std::fmt;

use crate::error::{LockError, Result};

/// Removes known secrets (passwords from URLs and configs) from text that came from a client
/// library, before it reaches an error message.
#[cfg(any(feature = "redis", feature = "postgres"))]
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

#[cfg(any(feature = "redis", feature = "postgres"))]
impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        Redactor {
            secrets: secrets.into_iter().filter(|s| !s.is_empty()).collect(),
        }
    }

    pub fn clean(&self, text: &str) -> String {
        self.secrets.iter().fold(text.to_owned(), |text, secret| {
            text.replace(secret.as_str(), "***")
        })
    }

    /// A client library's error as a redacted `source` for a `LockError`: the original may
    /// carry connection details.
    #[cfg(feature = "redis")]
    pub fn source(&self, error: &dyn std::error::Error) -> RedactedError {
        RedactedError(self.clean(&error.to_string()))
    }
}

/// A client library's error, as redacted text.
#[cfg(feature = "redis")]
#[derive(Debug)]
pub(crate) struct RedactedError(pub String);

#[cfg(feature = "redis")]
impl fmt::Display for RedactedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(feature = "redis")]
impl std::error::Error for RedactedError {}

/// Where a pooled backend gets its connections: a URL to open its own pool from, or the
/// application's pool.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) enum Source<P> {
    Url(String),
    Pool(P),
}

/// Checks what every pooled backend's builder takes: exactly one of URL and pool, timeouts
/// above zero, at least one connection.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn pool_source<P>(
    backend: &str,
    url: Option<String>,
    pool: Option<P>,
    timeouts: &[(&str, std::time::Duration)],
    pool_size: u32,
) -> Result<Source<P>> {
    if let Some((name, _)) = timeouts.iter().find(|(_, value)| value.is_zero()) {
        return Err(LockError::invalid_argument(format!(
            "{name} must be above zero"
        )));
    }
    if pool_size == 0 {
        return Err(LockError::invalid_argument("pool_size must be at least 1"));
    }
    match (url, pool) {
        (Some(url), None) => Ok(Source::Url(url)),
        (None, Some(pool)) => Ok(Source::Pool(pool)),
        (Some(_), Some(_)) => Err(LockError::invalid_argument(format!(
            "give the {backend} backend a URL or a pool, not both"
        ))),
        (None, None) => Err(LockError::invalid_argument(format!(
            "the {backend} backend needs a URL or a pool"
        ))),
    }
}

/// The builder methods every pooled backend shares, written once with their docs. Expanded
/// inside each builder's `impl`, whose struct has the fields `cleanup_in_is_locked`,
/// `pool_size`, `timeouts` (`connect`, `checkout`) and `tls_ca_file`, and whose module has a
/// `CLEANUP_GUARD_MS`.
#[cfg(any(feature = "redis", feature = "postgres"))]
macro_rules! pooled_builder_options {
    () => {
        /// Let `is_locked` delete the key's lock when it is more than [`CLEANUP_GUARD_MS`]
        /// past expiry (default off: `is_locked` is then read-only). Never touches fence
        /// counters.
        pub fn cleanup_in_is_locked(mut self, enabled: bool) -> Self {
            self.cleanup_in_is_locked = enabled;
            self
        }

        /// Most connections kept open (default 8). Ignored with [`pool`](Self::pool).
        pub fn pool_size(mut self, size: u32) -> Self {
            self.pool_size = size;
            self
        }

        /// Timeout for opening a connection (default 2 s).
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.timeouts.connect = timeout;
            self
        }

        /// How long an operation waits for a pooled connection (default 3 s). Ignored with
        /// [`pool`](Self::pool), whose own setting applies.
        pub fn pool_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.timeouts.checkout = timeout;
            self
        }

        /// A PEM file of one or more CA certificates to trust besides the system's root
        /// certificates, for TLS connections: a private CA, or that of a TLS-inspecting proxy
        /// (see [TLS](self#tls)). Used only when the URL asks for TLS; the URL can
        /// give the same (`?tls_ca_file=PATH` for Redis, `?sslrootcert=PATH` for PostgreSQL),
        /// and this option wins. A file that cannot be read or holds no valid certificate
        /// fails [`build`](Self::build) with `InvalidArgument` naming the path. Refused with
        /// [`pool`](Self::pool), whose connections have TLS settings of their own.
        pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
            self.tls_ca_file = Some(path.into());
            self
        }
    };
}
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) use pooled_builder_options;

/// A backend URL with syncguard's own query options taken out.
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) struct SplitUrl {
    /// The URL for the client library: without syncguard's options.
    pub url: url::Url,
    /// syncguard's options, as given.
    pub options: Vec<(String, String)>,
    /// The URL with passwords replaced by `***`, for `Debug`.
    pub display: String,
    /// Passwords found in the URL (raw and percent-decoded), for a [`Redactor`].
    pub secrets: Vec<String>,
}

/// Query parameters that carry a password in some URL dialects.
const SECRET_PARAMS: [&str; 3] = ["pass", "password", "sslpassword"];

/// The query parameters a backend URL may carry.
pub(crate) struct UrlParams<'a> {
    /// Read by syncguard itself and taken out of the URL. Each may appear once, with a value.
    pub ours: &'a [&'a str],
    /// Passed on to the client library in the URL (e.g. `application_name`, `protocol`).
    pub client: &'a [&'a str],
}

/// Parses `raw`, moves syncguard's own query parameters out of it, and collects what must
/// never be shown. Before any I/O, refuses a parameter neither syncguard nor the client reads
/// (a typo such as `?prefx=` would otherwise be ignored), one of ours given twice or empty.
/// Messages name the parameter and never repeat a value.
pub(crate) fn split_url(raw: &str, what: &str, params: &UrlParams<'_>) -> Result<SplitUrl> {
    if raw.trim().is_empty() {
        return Err(LockError::invalid_argument(format!(
            "the {what} URL is empty"
        )));
    }
    let mut url = url::Url::parse(raw.trim())
        .map_err(|e| LockError::invalid_argument(format!("malformed {what} URL: {e}")))?;
    let mut options: Vec<(String, String)> = Vec::new();
    let mut kept = Vec::new();
    let mut secrets = Vec::new();
    for (name, value) in url.query_pairs() {
        if SECRET_PARAMS.contains(&name.as_ref()) {
            secrets.push(value.clone().into_owned());
        }
        if params.ours.contains(&name.as_ref()) {
            if value.trim().is_empty() {
                return Err(LockError::invalid_argument(format!(
                    "the {what} URL parameter `{name}` is empty: give it a value or leave it out"
                )));
            }
            if options.iter().any(|(seen, _)| seen.as_str() == name) {
                return Err(LockError::invalid_argument(format!(
                    "the {what} URL parameter `{name}` is given twice"
                )));
            }
            options.push((name.into_owned(), value.into_owned()));
        } else if params.client.contains(&name.as_ref()) {
            kept.push((name.into_owned(), value.into_owned()));
        } else {
            return Err(unknown_param(what, &name, params));
        }
    }
    if let Some(password) = url.password() {
        secrets.push(password.to_owned());
        if let Ok(decoded) = percent_encoding::percent_decode_str(password).decode_utf8() {
            secrets.push(decoded.into_owned());
        }
    }
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(&kept);
    }
    let mut shown = url.clone();
    if shown.password().is_some() {
        // Only URLs that cannot have a password refuse one, and this one has a password.
        let _ = shown.set_password(Some("***"));
    }
    if shown.query().is_some() {
        let masked: Vec<(String, String)> = kept
            .iter()
            .map(|(name, value)| {
                let value = if SECRET_PARAMS.contains(&name.as_str()) {
                    "***"
                } else {
                    value
                };
                (name.clone(), value.to_owned())
            })
            .collect();
        shown.query_pairs_mut().clear().extend_pairs(&masked);
    }
    Ok(SplitUrl {
        url,
        options,
        display: shown.to_string(),
        secrets,
    })
}

/// The error for a URL parameter nobody reads: names it (cut short: it is user input), the
/// nearest known name when one is close, and the names that are known.
fn unknown_param(what: &str, name: &str, params: &UrlParams<'_>) -> LockError {
    let shown: String = name.chars().take(40).collect();
    let known = params.ours.iter().chain(params.client);
    let nearest = known
        .clone()
        .map(|candidate| (edit_distance(name, candidate), *candidate))
        .filter(|(distance, _)| *distance <= 2)
        .min();
    let hint = match nearest {
        Some((_, candidate)) => format!(" (did you mean `{candidate}`?)"),
        None => String::new(),
    };
    let known: Vec<&str> = known.copied().collect();
    let known = if known.is_empty() {
        "none".to_owned()
    } else {
        known.join(", ")
    };
    LockError::invalid_argument(format!(
        "unknown {what} URL parameter `{shown}`{hint}; known parameters: {known}"
    ))
}

/// Levenshtein distance, for "did you mean" hints on short names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// Runs `call` on a connection from `checkout`. When the connection turns out to have been dead
/// already (`dead` says so: a restarted server, a dropped socket) it is let go and the call is
/// made once more on a fresh one. Every operation of every backend is safe to repeat: acquire
/// recognises its own lock id, release and extend are idempotent, the rest only read.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn with_one_reconnect<C, T, E>(
    mut checkout: impl FnMut() -> Result<C>,
    mut call: impl FnMut(&mut C) -> std::result::Result<T, E>,
    dead: impl Fn(&E) -> bool,
    map: impl Fn(E) -> LockError,
) -> Result<T> {
    let mut retried = false;
    loop {
        let mut connection = checkout()?;
        match call(&mut connection) {
            Ok(value) => return Ok(value),
            Err(error) if !retried && dead(&error) => {
                retried = true;
                drop(connection);
            }
            Err(error) => return Err(map(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[test]
    fn redactor_scrubs_every_occurrence() {
        let r = Redactor::new(["hunter2".to_owned(), String::new()]);
        assert_eq!(
            r.clean("auth hunter2 failed: hunter2"),
            "auth *** failed: ***"
        );
        assert_eq!(r.clean("nothing"), "nothing");
    }

    #[test]
    fn urls_lose_our_options_and_hide_passwords() {
        let split = split_url(
            "redis://app:s%40cret@127.0.0.1:6380/2?prefix=jobs&protocol=resp3&pass=x9",
            "Redis",
            &UrlParams {
                ours: &["prefix"],
                client: &["protocol", "pass"],
            },
        )
        .unwrap();
        assert_eq!(
            split.url.as_str(),
            "redis://app:s%40cret@127.0.0.1:6380/2?protocol=resp3&pass=x9"
        );
        assert_eq!(
            split.display,
            "redis://app:***@127.0.0.1:6380/2?protocol=resp3&pass=***"
        );
        assert_eq!(split.options, [("prefix".to_owned(), "jobs".to_owned())]);
        for secret in ["s%40cret", "s@cret", "x9"] {
            assert!(split.secrets.contains(&secret.to_owned()), "{secret}");
        }
    }

    #[test]
    fn malformed_urls_are_not_echoed() {
        for url in ["", "no scheme", "redis://x:hunter2@h:notaport/"] {
            let err = split_url(url, "Redis", &NONE).err().unwrap();
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    const NONE: UrlParams<'static> = UrlParams {
        ours: &[],
        client: &[],
    };

    #[test]
    fn unknown_empty_and_repeated_parameters_are_refused_by_name() {
        let params = UrlParams {
            ours: &["table", "fence_table"],
            client: &["application_name"],
        };
        let refused = |url: &str| split_url(url, "PostgreSQL", &params).err().unwrap();
        let err = refused("postgres://h/db?tabel=x");
        assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
        assert_eq!(
            err.message(),
            "unknown PostgreSQL URL parameter `tabel` (did you mean `table`?); known \
             parameters: table, fence_table, application_name"
        );
        let err = refused("postgres://h/db?colour=secret-value");
        assert!(!err.message().contains("did you mean"), "{err}");
        assert!(!err.message().contains("secret-value"), "{err}");
        assert_eq!(
            refused("postgres://h/db?table=").message(),
            "the PostgreSQL URL parameter `table` is empty: give it a value or leave it out"
        );
        assert_eq!(
            refused("postgres://h/db?table=a&table=b").message(),
            "the PostgreSQL URL parameter `table` is given twice"
        );
        assert!(split_url("postgres://h/db?application_name=", "PostgreSQL", &params).is_ok());
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("prefx", "prefix"), 1);
        assert_eq!(edit_distance("tabel", "table"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[test]
    fn one_reconnect_then_the_error() {
        let mut checkouts = 0;
        let result: Result<()> = with_one_reconnect(
            || {
                checkouts += 1;
                Ok(())
            },
            |_| Err("dead"),
            |_| true,
            LockError::internal,
        );
        assert_eq!(result.unwrap_err().message(), "dead");
        assert_eq!(checkouts, 2);
    }
}
