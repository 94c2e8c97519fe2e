//! Tokens for the attached service account from the metadata server of GCE, Cloud Run and GKE
//! ([`Credentials::MetadataServer`](super::Credentials::MetadataServer), and the last resort of
//! [`Credentials::Default`](super::Credentials::Default)).

use std::fmt;

use super::cache::{FetchToken, FetchedToken};
use super::http::{Http, read_token_answer};
use super::source::Env;
use crate::error::{LockError, Result};

/// Where the metadata server is when `GCE_METADATA_HOST` does not say otherwise.
const DEFAULT_METADATA_HOST: &str = "metadata.google.internal";
/// The token path of the metadata server, below `http://{host}`.
const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// The metadata server's `host[:port]`, from `GCE_METADATA_HOST` or the default.
fn metadata_host_from_env(env: Env<'_>) -> Result<String> {
    let Some(host) = env("GCE_METADATA_HOST") else {
        return Ok(DEFAULT_METADATA_HOST.to_owned());
    };
    let host = host
        .into_string()
        .map_err(|_| LockError::invalid_argument("GCE_METADATA_HOST is not valid Unicode"))?;
    match host.trim() {
        "" => Ok(DEFAULT_METADATA_HOST.to_owned()),
        host => validate_metadata_host(host),
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
    agent: crate::firestore::transport::Agent,
}

impl MetadataSource {
    /// The metadata server `GCE_METADATA_HOST` in `env` names, or the default one.
    pub(super) fn from_env(env: Env<'_>, http: &Http) -> Result<MetadataSource> {
        Ok(MetadataSource::new(metadata_host_from_env(env)?, http))
    }

    /// `host` is `host[:port]`, already checked.
    pub(super) fn new(host: String, http: &Http) -> MetadataSource {
        MetadataSource {
            url: format!("http://{host}{METADATA_TOKEN_PATH}"),
            host,
            // The metadata server is link-local: a proxy could not reach it, and must never
            // see its tokens.
            agent: http.agent(true),
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
            " (outside Google Cloud, run `gcloud auth application-default login`, set \
             GOOGLE_APPLICATION_CREDENTIALS to a credentials file, or pass credentials \
             explicitly)"
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

    #[test]
    fn the_host_comes_from_gce_metadata_host_else_the_default() {
        let with = |value: Option<&str>| {
            metadata_host_from_env(&|name: &str| {
                assert_eq!(name, "GCE_METADATA_HOST");
                value.map(std::ffi::OsString::from)
            })
        };
        assert_eq!(with(None).unwrap(), DEFAULT_METADATA_HOST);
        assert_eq!(with(Some("  ")).unwrap(), DEFAULT_METADATA_HOST);
        assert_eq!(with(Some(" 127.0.0.1:8080 ")).unwrap(), "127.0.0.1:8080");
        assert_eq!(
            with(Some("http://x/")).unwrap_err().code(),
            ErrorCode::InvalidArgument
        );
    }
}
