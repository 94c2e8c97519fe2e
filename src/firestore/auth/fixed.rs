//! A fixed bearer token ([`Credentials::Token`](super::Credentials::Token)): nothing to fetch
//! or refresh.

use std::fmt;

use super::http::is_header_safe;
use super::source::TokenSource;
use crate::error::{LockError, Result};

/// A fixed token, sent as is.
pub(super) struct FixedToken {
    authorization: String,
}

impl FixedToken {
    pub(super) fn new(token: &str) -> Result<FixedToken> {
        let token = token.trim();
        if token.is_empty() {
            return Err(LockError::invalid_argument("the bearer token is empty"));
        }
        if !is_header_safe(token) {
            return Err(LockError::invalid_argument(
                "the bearer token contains characters an HTTP header cannot carry",
            ));
        }
        Ok(FixedToken {
            authorization: format!("Bearer {token}"),
        })
    }
}

impl TokenSource for FixedToken {
    fn authorization(&self) -> Result<String> {
        Ok(self.authorization.clone())
    }
}

impl fmt::Debug for FixedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FixedToken(<redacted>)")
    }
}
