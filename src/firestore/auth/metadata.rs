//! Tokens for the attached service account from the metadata server of GCE, Cloud Run and GKE
//! ([`Credentials::MetadataServer`](super::Credentials::MetadataServer), and the last resort of
//! [`Credentials::Default`](super::Credentials::Default)).

use std::fmt;
use std::time::Duration;

use super::cache::{FetchToken, FetchedToken};
use super::http::{agent, read_token_answer};
use crate::error::{LockError, Result};

/// Where the metadata server is when `GCE_METADATA_HOST` does not say otherwise.
const DEFAULT_METADATA_HOST: &str = "metadata.google.internal";
/// The token path of the metadata server, below `http://{host}`.
const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// The metadata server's `host[:port]`, from `GCE_METADATA_HOST` or the default.
fn metadata_host_from_env() -> Result<String> {
    match std::env::var("GCE_METADATA_HOST") {
        Ok(host) if !host.trim().is_empty() => validate_metadata_host(host.trim()),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(DEFAULT_METADATA_HOST.to_owned()),
        Err(std::env::VarError::NotUnicode(_)) => Err(LockError::invalid_argument(
            "GCE_METADATA_HOST is not valid Unicode",
        )),
    }
}

/// Checks that `host` is a bare host[:port], which is all the URL is built from.
fn validate_metadata_host(host: &str) -> Result<String> {
    let invalid = || {
        LockError::invalid_argument(format!(
            "GCE_METADATA_HOST must be a host or host:port, got {host:?}"
        ))
    };
    let url = url::Url::parse(&format!("http://{host}/")).map_err(|_| invalid())?;
    let bare = url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none()
        && url.host().is_some();
    if !bare {
        return Err(invalid());
    }
    Ok(host.to_owned())
}

/// Tokens for the attached service account, from the metadata server.
pub(super) struct MetadataSource {
    host: String,
    url: String,
    agent: ureq::Agent,
}

impl MetadataSource {
    /// The metadata server `GCE_METADATA_HOST` names, or the default one.
    pub(super) fn from_env(timeout: Duration) -> Result<MetadataSource> {
        Ok(MetadataSource::new(metadata_host_from_env()?, timeout))
    }

    /// `host` is `host[:port]`, already checked.
    pub(super) fn new(host: String, timeout: Duration) -> MetadataSource {
        MetadataSource {
            url: format!("http://{host}{METADATA_TOKEN_PATH}"),
            host,
            // The metadata server is link-local: a proxy could not reach it, and must never
            // see its tokens.
            agent: agent(timeout, true),
        }
    }
}

impl FetchToken for MetadataSource {
    fn fetch(&self) -> Result<FetchedToken> {
        let what = format!("the metadata server at {}", self.host);
        let answer = self
            .agent
            .get(&self.url)
            .header("Metadata-Flavor", "Google")
            .header("Accept", "application/json")
            .call();
        // The usual reason the default host cannot be reached: not running on Google Cloud.
        let hint = if self.host == DEFAULT_METADATA_HOST {
            " (outside Google Cloud, set GOOGLE_APPLICATION_CREDENTIALS to a service-account \
             key file or pass credentials explicitly)"
        } else {
            ""
        };
        read_token_answer(&what, answer, &[], hint)
    }
}

impl fmt::Debug for MetadataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetadataServer")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn metadata_hosts_are_bare_hosts() {
        for ok in [
            "metadata.google.internal",
            "127.0.0.1:8080",
            "[::1]:80",
            "169.254.169.254",
        ] {
            assert_eq!(validate_metadata_host(ok).unwrap(), ok);
        }
        for bad in ["http://x/", "x/y", "u:p@x", "x?y", "x#y", "x:notaport", ""] {
            let err = validate_metadata_host(bad).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad}");
        }
    }
}
