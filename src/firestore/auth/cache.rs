//! The token cache: keeps a fetched token until shortly before it expires, one refresh at a
//! time, and falls back on a still-valid token for a while when a refresh fails.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::source::TokenSource;
use crate::error::Result;

/// A token is fetched again this long before it expires, or a quarter of its lifetime before
/// when that is shorter: long enough that a request made with it does not see it expire.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// After a failed refresh, a token that is still valid is used for this long before the next
/// attempt, so that an unavailable token endpoint does not make every call wait on it.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// A token is only used as a fallback while it stays valid at least this long: the request
/// that carries it must still reach Firestore before it expires.
const FALLBACK_MIN_VALIDITY: Duration = Duration::from_secs(10);
/// Lifetimes are capped here so that no answer can make the cache's time arithmetic overflow.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// A token as the endpoint gave it.
pub(super) struct FetchedToken {
    pub(super) access_token: String,
    pub(super) lifetime: Duration,
}

/// Gets a new token the way one kind of credentials does (a token endpoint, the metadata
/// server). When to ask is [`Cached`]'s business.
pub(super) trait FetchToken: Send + Sync + fmt::Debug {
    /// Asks for a token now.
    fn fetch(&self) -> Result<FetchedToken>;
}

/// The [`TokenSource`] of credentials whose tokens expire: what `F` fetches is kept until
/// shortly before it expires. Shown as `F` alone.
pub(super) struct Cached<F> {
    fetcher: F,
    cache: TokenCache,
}

impl<F: FetchToken + 'static> Cached<F> {
    pub(super) fn boxed(fetcher: F) -> Box<dyn TokenSource> {
        Box::new(Cached {
            fetcher,
            cache: TokenCache::default(),
        })
    }
}

impl<F: FetchToken> TokenSource for Cached<F> {
    fn authorization(&self) -> Result<String> {
        self.cache
            .authorization(Instant::now, || self.fetcher.fetch())
    }
}

impl<F: fmt::Debug> fmt::Debug for Cached<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.fetcher, f)
    }
}

/// The cached token and what is known about refreshing it.
#[derive(Default)]
struct TokenCache {
    // Held during a refresh, on purpose: the callers that arrive meanwhile wait for the token
    // being fetched instead of fetching their own.
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    token: Option<CachedToken>,
    /// When the last refresh failed, if the one after it has not succeeded yet.
    failed_at: Option<Instant>,
}

struct CachedToken {
    authorization: String,
    refresh_at: Instant,
    expires_at: Instant,
}

impl CachedToken {
    /// `requested` is when the request for it was sent: its lifetime runs from no earlier.
    fn new(fetched: FetchedToken, requested: Instant) -> CachedToken {
        let lifetime = fetched.lifetime.min(MAX_TOKEN_LIFETIME);
        let margin = REFRESH_MARGIN.min(lifetime / 4);
        let expires_at = requested.checked_add(lifetime).unwrap_or(requested);
        CachedToken {
            authorization: format!("Bearer {}", fetched.access_token),
            refresh_at: expires_at.checked_sub(margin).unwrap_or(requested),
            expires_at,
        }
    }

    fn usable_as_fallback(&self, now: Instant) -> bool {
        now.checked_add(FALLBACK_MIN_VALIDITY)
            .is_some_and(|later| later < self.expires_at)
    }
}

impl TokenCache {
    /// The cached header value while it is fresh, else the one `fetch` gets. `now` is the
    /// clock, a parameter for the tests.
    fn authorization(
        &self,
        now: impl Fn() -> Instant,
        fetch: impl FnOnce() -> Result<FetchedToken>,
    ) -> Result<String> {
        // A panic elsewhere while holding the lock cannot leave the state half-written: every
        // update is a single assignment.
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *guard;
        let started = now();
        if let Some(token) = &state.token {
            if started < token.refresh_at {
                return Ok(token.authorization.clone());
            }
            let failed_recently = state
                .failed_at
                .and_then(|failed| failed.checked_add(RETRY_AFTER_FAILURE))
                .is_some_and(|retry_at| started < retry_at);
            if failed_recently && token.usable_as_fallback(started) {
                return Ok(token.authorization.clone());
            }
        }
        match fetch() {
            Ok(fetched) => {
                log::debug!(
                    "syncguard: fetched a Firestore access token valid for {} s",
                    fetched.lifetime.as_secs()
                );
                let token = CachedToken::new(fetched, started);
                let authorization = token.authorization.clone();
                state.token = Some(token);
                state.failed_at = None;
                Ok(authorization)
            }
            Err(error) => {
                let now = now();
                match &state.token {
                    Some(token) if token.usable_as_fallback(now) => {
                        log::warn!(
                            "syncguard: could not refresh the Firestore access token, using \
                             the current one until it nearly expires: {error}"
                        );
                        state.failed_at = Some(now);
                        Ok(token.authorization.clone())
                    }
                    _ => Err(error),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, LockError};

    fn fetched(token: &str, seconds: u64) -> Result<FetchedToken> {
        Ok(FetchedToken {
            access_token: token.to_owned(),
            lifetime: Duration::from_secs(seconds),
        })
    }

    fn unavailable() -> Result<FetchedToken> {
        Err(LockError::new(ErrorCode::ServiceUnavailable, "down"))
    }

    #[test]
    fn tokens_are_refreshed_five_minutes_or_a_quarter_lifetime_before_expiry() {
        let t0 = Instant::now();
        let at = |seconds: u64| t0 + Duration::from_secs(seconds);
        for (lifetime, refresh_after) in [(3600, 3300), (1200, 900), (400, 300), (4, 3), (0, 0)] {
            let token = CachedToken::new(fetched("t", lifetime).unwrap(), t0);
            assert_eq!(token.refresh_at, at(refresh_after), "lifetime {lifetime}");
            assert_eq!(token.expires_at, at(lifetime), "lifetime {lifetime}");
        }
        let huge = CachedToken::new(fetched("t", u64::MAX).unwrap(), t0);
        assert_eq!(huge.expires_at, t0 + MAX_TOKEN_LIFETIME);
    }

    /// A cache on a clock that counts whole seconds from the start of the test.
    struct Timeline {
        cache: TokenCache,
        t0: Instant,
    }

    impl Timeline {
        fn new() -> Self {
            Timeline {
                cache: TokenCache::default(),
                t0: Instant::now(),
            }
        }

        /// The authorization the cache gives at `seconds`, fetching with `fetch` if it must.
        fn at(&self, seconds: u64, fetch: impl FnOnce() -> Result<FetchedToken>) -> Result<String> {
            let t0 = self.t0;
            self.cache
                .authorization(move || t0 + Duration::from_secs(seconds), fetch)
        }
    }

    /// A fetch of a one-hour token.
    fn token(name: &'static str) -> impl FnOnce() -> Result<FetchedToken> {
        move || fetched(name, 3600)
    }

    fn never() -> Result<FetchedToken> {
        panic!("should not fetch")
    }

    #[test]
    fn the_cache_serves_fresh_tokens_and_refreshes_stale_ones() {
        let t = Timeline::new();
        assert_eq!(t.at(0, token("one")).unwrap(), "Bearer one");
        assert_eq!(t.at(3299, never).unwrap(), "Bearer one");
        assert_eq!(t.at(3300, token("two")).unwrap(), "Bearer two");
        assert_eq!(t.at(3301, never).unwrap(), "Bearer two");
    }

    #[test]
    fn a_failed_refresh_falls_back_to_the_valid_token_for_a_while() {
        let t = Timeline::new();
        t.at(0, token("one")).unwrap();
        // Due for refresh, the endpoint is down, the token has 290 s left: use it...
        assert_eq!(t.at(3310, unavailable).unwrap(), "Bearer one");
        // ...without asking again for a few seconds...
        assert_eq!(t.at(3312, never).unwrap(), "Bearer one");
        // ...then asking again.
        assert_eq!(t.at(3315, token("two")).unwrap(), "Bearer two");
    }

    #[test]
    fn a_failed_refresh_is_an_error_once_the_token_is_nearly_expired() {
        let t = Timeline::new();
        let err = t.at(0, unavailable).unwrap_err();
        assert_eq!(err.code(), ErrorCode::ServiceUnavailable);
        t.at(0, token("one")).unwrap();
        let err = t.at(3591, unavailable).unwrap_err();
        assert_eq!(err.code(), ErrorCode::ServiceUnavailable);
        // No pause after a failure without a fallback: the next call tries again.
        assert_eq!(t.at(3592, token("two")).unwrap(), "Bearer two");
    }
}
