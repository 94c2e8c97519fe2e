//! What every network backend shares: keeping secrets out of messages, and the rule for
//! repeating a call whose pooled connection turned out to be dead.

use crate::error::{LockError, Result};

/// Removes passwords from text that came from a client library, before it reaches an error
/// message: the password of every URL in the text (`scheme://user:PASSWORD@host`, whoever's),
/// every `password=` / `pass=` / `sslpassword=` value (connection strings, URL queries), and a
/// configured password of [`LONG_SECRET`] characters or more wherever it appears.
///
/// Shorter configured passwords are not searched for as bare text: `s`, `a` or `er` occur in
/// every message (`pa***word authentication failed for u***er` is what that gave), and a
/// password equal to a user or database name would hide those. Client libraries show a
/// password only inside a URL or a connection string, which are redacted whatever it is.
#[cfg(any(feature = "redis", feature = "postgres"))]
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    /// Configured passwords long enough to be searched for anywhere.
    long_secrets: Vec<String>,
}

/// From this many characters on, a configured password is removed wherever it appears: no
/// message holds such a string by chance.
#[cfg(any(feature = "redis", feature = "postgres"))]
const LONG_SECRET: usize = 16;

/// What a redacted password is replaced with.
#[cfg(any(feature = "redis", feature = "postgres"))]
const MASK: &str = "***";

#[cfg(any(feature = "redis", feature = "postgres"))]
impl Redactor {
    /// A redactor for the passwords of a configuration (raw and percent-decoded).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut long_secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.chars().count() >= LONG_SECRET)
            .collect();
        // Longest first: a secret that contains another is replaced whole.
        long_secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor { long_secrets }
    }

    /// `text` without passwords.
    pub fn clean(&self, text: &str) -> String {
        let text = redact_parameters(&redact_url_passwords(text));
        self.long_secrets
            .iter()
            .fold(text, |text, secret| text.replace(secret.as_str(), MASK))
    }
}

/// Where a URL's authority (or the whole URL, in text) ends.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`')
}

/// Every `scheme://user:password@` in `text` with the password replaced: userinfo is what
/// precedes the last `@` of the authority (the text up to the first `/`, `?` or `#`).
#[cfg(any(feature = "redis", feature = "postgres"))]
fn redact_url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let span_end = after.find(ends_url).unwrap_or(after.len());
        let authority_end = after[..span_end].find(['/', '?', '#']).unwrap_or(span_end);
        let authority = &after[..authority_end];
        match authority.rfind('@') {
            Some(userinfo_end) => {
                let userinfo = &authority[..userinfo_end];
                match userinfo.find(':') {
                    Some(colon) if colon + 1 < userinfo.len() => {
                        out.push_str(&userinfo[..=colon]);
                        out.push_str(MASK);
                    }
                    _ => out.push_str(userinfo),
                }
                out.push_str(&after[userinfo_end..authority_end]);
            }
            None => out.push_str(authority),
        }
        rest = &after[authority_end..];
    }
    out.push_str(rest);
    out
}

/// Every value of a parameter named like a password (`password=…`, `pass=…`,
/// `sslpassword=…`, any case; quoted as in a libpq connection string or not) replaced.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn redact_parameters(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find('=').map(|i| from + i) {
        from = found + 1;
        // libpq allows blanks around `=`.
        let name_end = lower[..found].trim_end().len();
        let name_start = lower[..name_end]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        if !SECRET_PARAMS.contains(&&lower[name_start..name_end]) {
            continue;
        }
        let value_start = text.len() - text[found + 1..].trim_start().len();
        let value = &text[value_start..];
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            // libpq quoting: `\'` and `\\` are escapes; the value ends at the next bare `'`.
            let mut escaped = false;
            let close = quoted.char_indices().find(|&(_, c)| {
                let closes = c == '\'' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            });
            close.map_or(value.len(), |(i, _)| i + 2)
        } else {
            value
                .find(|c: char| ends_url(c) || matches!(c, '&' | ';' | ',' | ')'))
                .unwrap_or(value.len())
        };
        if value_len == 0 {
            continue;
        }
        out.push_str(&text[copied..value_start]);
        out.push_str(MASK);
        copied = value_start + value_len;
        from = copied;
    }
    out.push_str(&text[copied..]);
    out
}

/// A backend URL with syncguard's own query options taken out.
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) struct SplitUrl {
    /// The URL for the client library: without syncguard's options.
    pub url: url::Url,
    /// syncguard's options, decoded as a form (`+` is a space, as for the Redis client).
    #[cfg_attr(not(any(feature = "redis", feature = "firestore")), allow(dead_code))]
    pub options: Vec<(String, String)>,
    /// syncguard's options with their values as written (for libpq's decoding, where `+` is a
    /// plus sign).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub raw_options: Vec<(String, String)>,
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
    let mut raw_options: Vec<(String, String)> = Vec::new();
    // The client's parameters as written: decoding and encoding them again would change them
    // (a form-encoder writes a space as `+`, which libpq reads as a plus sign).
    let mut kept: Vec<String> = Vec::new();
    let mut shown_query: Vec<String> = Vec::new();
    let mut secrets = Vec::new();
    let query = url.query().unwrap_or("").to_owned();
    for piece in query.split('&').filter(|piece| !piece.is_empty()) {
        let Some((name, value)) = url::form_urlencoded::parse(piece.as_bytes()).next() else {
            continue;
        };
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
            let raw_value = piece.split_once('=').map_or("", |(_, raw)| raw);
            raw_options.push((name.clone().into_owned(), raw_value.to_owned()));
            options.push((name.into_owned(), value.into_owned()));
        } else if params.client.contains(&name.as_ref()) {
            kept.push(piece.to_owned());
            shown_query.push(if SECRET_PARAMS.contains(&name.as_ref()) {
                let raw_name = piece.split_once('=').map_or(piece, |(raw, _)| raw);
                format!("{raw_name}=***")
            } else {
                piece.to_owned()
            });
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
    let query = |pieces: &[String]| (!pieces.is_empty()).then(|| pieces.join("&"));
    url.set_query(query(&kept).as_deref());
    let mut shown = url.clone();
    if shown.password().is_some() {
        // Only URLs that cannot have a password refuse one, and this one has a password.
        let _ = shown.set_password(Some("***"));
    }
    shown.set_query(query(&shown_query).as_deref());
    Ok(SplitUrl {
        url,
        options,
        raw_options,
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
    fn short_passwords_leave_messages_intact() {
        for secret in ["s", "a", "er", "user", "postgres", "hunter2"] {
            let r = Redactor::new([secret.to_owned(), String::new()]);
            for text in [
                "password authentication failed for user \"user\" (SQLSTATE 28P01)",
                "PostgreSQL at 127.0.0.1:5432/postgres: the syncguard tables are missing",
                "WRONGPASS invalid username-password pair or user is disabled.",
            ] {
                assert_eq!(r.clean(text), text, "{secret}");
            }
        }
    }

    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[test]
    fn url_passwords_are_redacted_whoever_they_belong_to() {
        let r = Redactor::new(["s".to_owned()]);
        for (text, clean) in [
            (
                "Failed to connect to redis://:s@127.0.0.1:7001: Connection refused",
                "Failed to connect to redis://:***@127.0.0.1:7001: Connection refused",
            ),
            (
                "node rediss://default:er@[::1]:6380/0 moved; redis://h:1 too",
                "node rediss://default:***@[::1]:6380/0 moved; redis://h:1 too",
            ),
            (
                "(postgres://app:a%40b@h1,h2:5432/db?x=1)",
                "(postgres://app:***@h1,h2:5432/db?x=1)",
            ),
            (
                "'redis://u:p@ss@host:1/2' and redis://user@host/",
                "'redis://u:***@host:1/2' and redis://user@host/",
            ),
            ("redis://:@host:1", "redis://:@host:1"),
        ] {
            assert_eq!(r.clean(text), clean);
        }
    }

    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[test]
    fn password_parameters_are_redacted() {
        let r = Redactor::default();
        for (text, clean) in [
            (
                "host=h password=s dbname=er user=a",
                "host=h password=*** dbname=er user=a",
            ),
            (
                "host=h PASSWORD = 'it\\'s a \\\\ x' port=5",
                "host=h PASSWORD = *** port=5",
            ),
            (
                "?pass=er&sslpassword=a&db=0",
                "?pass=***&sslpassword=***&db=0",
            ),
            ("?password=&user=x", "?password=&user=x"),
            ("compass=north", "compass=north"),
        ] {
            assert_eq!(r.clean(text), clean);
        }
    }

    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[test]
    fn long_passwords_are_redacted_anywhere() {
        let long = "Zx9-very-long-secret-Qw7";
        let r = Redactor::new([long.to_owned(), "s".to_owned()]);
        assert_eq!(
            r.clean(&format!("auth {long} failed: {long}s")),
            "auth *** failed: ***s"
        );
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
