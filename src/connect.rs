//! Choosing a backend from a URL, so programs, examples and the CLI can be pointed at any store
//! by configuration (`SYNCGUARD_URL`).

use crate::backend::LockBackend;
use crate::error::{LockError, Result};
use crate::memory::MemoryBackend;

/// The URL schemes [`connect`] knows, for messages.
const SCHEMES: &str = "memory:, redis://, rediss://, redis+unix://, redis-cluster://, \
                       rediss-cluster://, redis-sentinel://, rediss-sentinel://, postgres://, \
                       postgresql://, firestore://";

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
    let Some((scheme, rest)) = url.split_once(':') else {
        return Err(LockError::invalid_argument(format!(
            "not a backend URL (no scheme); expected one of {SCHEMES}"
        )));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "memory" if rest.is_empty() || rest == "//" => Ok(Box::new(MemoryBackend::new())),
        "memory" => Err(LockError::invalid_argument(
            "memory: URLs take no host, path or options",
        )),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+unix" | "redis-cluster" | "rediss-cluster"
        | "redis-sentinel" | "rediss-sentinel" => {
            Ok(Box::new(crate::redis::RedisBackend::connect(url)?))
        }
        #[cfg(not(feature = "redis"))]
        "redis" | "rediss" | "redis+unix" | "redis-cluster" | "rediss-cluster"
        | "redis-sentinel" | "rediss-sentinel" => unavailable("redis"),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Box::new(crate::postgres::PostgresBackend::connect(url)?)),
        #[cfg(not(feature = "postgres"))]
        "postgres" | "postgresql" => unavailable("postgres"),
        #[cfg(feature = "firestore")]
        "firestore" => Ok(Box::new(crate::firestore::FirestoreBackend::connect(url)?)),
        #[cfg(not(feature = "firestore"))]
        "firestore" => unavailable("firestore"),
        other => Err(LockError::invalid_argument(format!(
            "unsupported URL scheme {:?}; expected one of {SCHEMES}",
            truncate(other)
        ))),
    }
}

/// The answer for a backend this build was compiled without: which feature to enable, since
/// backends are opt-in and a first try without one is the usual way to get here.
#[cfg_attr(
    all(feature = "redis", feature = "postgres", feature = "firestore"),
    allow(dead_code)
)]
fn unavailable(feature: &str) -> Result<Box<dyn LockBackend>> {
    Err(LockError::invalid_argument(format!(
        "this build of syncguard has no {feature} backend: enable the crate's `{feature}` \
         feature (`cargo add syncguard --features {feature}`)"
    )))
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
