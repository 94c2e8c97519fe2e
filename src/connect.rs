//! Choosing a backend from a URL, so programs, examples and the CLI can be pointed at any store
//! by configuration (`SYNCGUARD_URL`).

use crate::backend::LockBackend;
use crate::error::{LockError, Result};
use crate::memory::MemoryBackend;

/// How a backend opens the (trimmed) URL that names it.
type Open = fn(&str) -> Result<Box<dyn LockBackend>>;

/// A backend a URL can name: its URL schemes (as messages show them), the Cargo feature that
/// compiles it (`""`: always there), and how it opens a URL — `None` in a build without its
/// feature.
struct Backend {
    schemes: &'static [&'static str],
    feature: &'static str,
    open: Option<Open>,
}

/// `Some` constructor of `$backend` (`$backend::connect(url)`) when the build has `$feature`.
macro_rules! open_with {
    ($feature:literal, $backend:ty) => {{
        #[cfg(feature = $feature)]
        let open: Option<Open> = Some(|url| Ok(Box::new(<$backend>::connect(url)?)));
        #[cfg(not(feature = $feature))]
        let open: Option<Open> = None;
        open
    }};
}

/// Every backend [`connect`] knows, in the order messages list them: the one list of schemes.
const BACKENDS: &[Backend] = &[
    Backend {
        schemes: &["memory:"],
        feature: "",
        open: Some(open_memory),
    },
    Backend {
        schemes: &[
            "redis://",
            "rediss://",
            "redis+unix://",
            "redis-cluster://",
            "rediss-cluster://",
            "redis-sentinel://",
            "rediss-sentinel://",
        ],
        feature: "redis",
        open: open_with!("redis", crate::redis::RedisBackend),
    },
    Backend {
        schemes: &["postgres://", "postgresql://"],
        feature: "postgres",
        open: open_with!("postgres", crate::postgres::PostgresBackend),
    },
    Backend {
        schemes: &["firestore://"],
        feature: "firestore",
        open: open_with!("firestore", crate::firestore::FirestoreBackend),
    },
];

/// Opens the backend a URL names:
///
/// | URL | backend |
/// |---|---|
/// | `memory:` | a new, empty [`MemoryBackend`] (each call its own) |
/// | `redis://…`, `rediss://…`, `redis+unix://…` | Redis (feature `redis`) |
/// | `redis-cluster://h1:p1,h2:p2/`, `rediss-cluster://…` | a Redis Cluster (feature `redis`) |
/// | `redis-sentinel://s1:p1,s2:p2/NAME`, `rediss-sentinel://…` | the Redis primary Sentinels name (feature `redis`) |
/// | `postgres://…`, `postgresql://…` | PostgreSQL (feature `postgres`) |
/// | `firestore://PROJECT[/DATABASE]` | Firestore (feature `firestore`) |
///
/// Each backend is a Cargo feature, off by default: a build without the one a URL names answers
/// `InvalidArgument` with the feature to enable (`cargo add syncguard --features redis`), as it
/// does for a malformed URL or an unknown scheme. Messages name the scheme only, never the rest
/// of the URL (it may hold a password).
///
/// ```
/// let backend = syncguard::connect("memory:")?;
/// assert_eq!(backend.capabilities().backend, "memory");
/// assert!(syncguard::connect("mysql://localhost").is_err());
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn connect(url: &str) -> Result<Box<dyn LockBackend>> {
    let url = url.trim();
    let Some((scheme, _)) = url.split_once(':') else {
        return Err(LockError::invalid_argument(format!(
            "not a backend URL (no scheme); expected one of {}",
            schemes()
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    let named = |shown: &&str| shown.split(':').next() == Some(scheme.as_str());
    let Some(backend) = BACKENDS.iter().find(|b| b.schemes.iter().any(named)) else {
        return Err(LockError::invalid_argument(format!(
            "unsupported URL scheme {:?}; expected one of {}",
            truncate(&scheme),
            schemes()
        )));
    };
    match backend.open {
        Some(open) => open(url),
        // Backends are opt-in, and a first try without one is the usual way to get here: say
        // which feature to enable.
        None => Err(LockError::invalid_argument(format!(
            "this build of syncguard has no {feature} backend: enable the crate's `{feature}` \
             feature (`cargo add syncguard --features {feature}`)",
            feature = backend.feature
        ))),
    }
}

/// The schemes [`connect`] knows, for messages.
fn schemes() -> String {
    let schemes: Vec<&str> = BACKENDS.iter().flat_map(|b| b.schemes).copied().collect();
    schemes.join(", ")
}

/// A new, empty [`MemoryBackend`] for `memory:` (or `memory://`), which takes nothing else.
fn open_memory(url: &str) -> Result<Box<dyn LockBackend>> {
    match url.split_once(':') {
        Some((_, "" | "//")) => Ok(Box::new(MemoryBackend::new())),
        _ => Err(LockError::invalid_argument(
            "memory: URLs take no host, path or options",
        )),
    }
}

/// A scheme echoed in a message is cut short: it is user input.
fn truncate(scheme: &str) -> String {
    scheme.chars().take(32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_urls() {
        for url in ["memory:", "memory://", "MEMORY:", " memory: "] {
            assert_eq!(
                connect(url).unwrap().capabilities().backend,
                "memory",
                "{url}"
            );
        }
        assert!(connect("memory:foo").is_err());
    }

    /// Every backend this build lacks: its URLs say which feature to enable, and still quote no
    /// password.
    #[test]
    fn a_missing_backend_names_its_feature() {
        let missing: &[(&str, &str)] = &[
            #[cfg(not(feature = "redis"))]
            ("redis", "redis://user:hunter2@127.0.0.1:1/"),
            #[cfg(not(feature = "redis"))]
            ("redis", "rediss://user:hunter2@127.0.0.1:1/"),
            #[cfg(not(feature = "redis"))]
            ("redis", "redis+unix:///tmp/hunter2.sock"),
            #[cfg(not(feature = "postgres"))]
            ("postgres", "postgres://user:hunter2@127.0.0.1:1/db"),
            #[cfg(not(feature = "postgres"))]
            ("postgres", "POSTGRESQL://user:hunter2@127.0.0.1:1/db"),
            #[cfg(not(feature = "firestore"))]
            ("firestore", "firestore://hunter2-project"),
        ];
        for (feature, url) in missing {
            let Err(err) = connect(url) else {
                panic!("{url} connected without its backend");
            };
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument, "{err}");
            assert!(
                err.message()
                    .contains(&format!("cargo add syncguard --features {feature}")),
                "{err}"
            );
            assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
        }
    }

    #[test]
    fn bad_urls_never_echo_secrets() {
        crate::error::assert_refused_without_secret(
            &[
                "",
                "localhost",
                "mysql://user:hunter2@db",
                "redis//user:hunter2@h",
            ],
            connect,
        );
    }
}
