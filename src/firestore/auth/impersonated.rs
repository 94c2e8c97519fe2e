//! Tokens for a service account impersonated by other credentials
//! (`"type": "impersonated_service_account"`, what `gcloud auth application-default login
//! --impersonate-service-account` writes): the `source_credentials` (a user or a service-account
//! key) get a `cloud-platform` token, which IAM's `generateAccessToken` exchanges for one of
//! the service account, through the `delegates` if any.

use std::fmt;

use serde_json::Value;

use super::authorized_user::AuthorizedUserSource;
use super::cache::{FetchToken, FetchedToken};
use super::fields::{Fields, type_of, unsupported_type};
use super::http::Http;
use super::impersonation::{DEFAULT_LIFETIME_SECS, Impersonation};
use super::service_account::ServiceAccountSource;
use super::source::{CLOUD_PLATFORM_SCOPE, SCOPE};
use crate::error::{LockError, Result};

/// The types `source_credentials` may have, for messages.
const SOURCE_TYPES: &str = "`authorized_user`, `service_account`";

/// Source credentials and the service account they impersonate.
pub(super) struct ImpersonatedSource {
    source: Box<dyn FetchToken>,
    impersonation: Impersonation,
}

impl ImpersonatedSource {
    /// The credentials in `value`, whose `type` is `impersonated_service_account`.
    pub(super) fn from_value(value: &Value, http: &Http) -> Result<ImpersonatedSource> {
        let fields = Fields::new(value, "impersonated_service_account");
        let url = fields.string("service_account_impersonation_url")?;
        let delegates = fields.strings("delegates")?;
        let source = match value.get("source_credentials") {
            Some(source) if source.is_object() => source,
            Some(_) => return Err(fields.invalid("source_credentials", "is not an object")),
            None => return Err(fields.invalid("source_credentials", "are missing")),
        };
        // The source's own messages say what is wrong with it; this says where it is.
        let in_source = |e: LockError| {
            LockError::new(e.code(), format!("`source_credentials`: {}", e.message()))
        };
        let source: Box<dyn FetchToken> = match type_of(source) {
            Some("authorized_user") => {
                Box::new(AuthorizedUserSource::from_value(source, http).map_err(in_source)?)
            }
            Some("service_account") => Box::new(
                ServiceAccountSource::from_value(source, CLOUD_PLATFORM_SCOPE, http)
                    .map_err(in_source)?,
            ),
            kind => return Err(in_source(unsupported_type(kind, SOURCE_TYPES))),
        };
        let impersonation =
            Impersonation::new(&fields, url, delegates, DEFAULT_LIFETIME_SECS, http)?;
        Ok(ImpersonatedSource {
            source,
            impersonation,
        })
    }
}

impl FetchToken for ImpersonatedSource {
    fn fetch(&self) -> Result<FetchedToken> {
        // Each impersonated token costs a source token: one of each an hour, so the source's
        // are not worth a cache of their own.
        let source = self.source.fetch()?;
        self.impersonation.generate(&source.access_token, SCOPE)
    }
}

impl fmt::Debug for ImpersonatedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImpersonatedServiceAccount")
            .field("service_account", &self.impersonation.service_account())
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use serde_json::json;

    const URL: &str = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/\
                       target@p.iam.gserviceaccount.com:generateAccessToken";

    fn impersonated() -> Value {
        json!({
            "type": "impersonated_service_account",
            "service_account_impersonation_url": URL,
            "delegates": ["a@p.iam.gserviceaccount.com", "projects/-/serviceAccounts/b@p"],
            "source_credentials": {
                "type": "authorized_user",
                "client_id": "123.apps.googleusercontent.com",
                "client_secret": "hunter2-client-secret",
                "refresh_token": "hunter2-refresh-token",
            },
        })
    }

    /// A change to otherwise valid credentials.
    type Change = fn(&mut Value);

    fn parse_with(change: impl FnOnce(&mut Value)) -> Result<ImpersonatedSource> {
        let mut value = impersonated();
        change(&mut value);
        ImpersonatedSource::from_value(&value, &Http::for_tests())
    }

    #[test]
    fn debug_names_the_service_account_and_the_source() {
        let source = parse_with(|_| {}).unwrap();
        assert_eq!(
            format!("{source:?}"),
            "ImpersonatedServiceAccount { service_account: \"target@p.iam.gserviceaccount.com\", \
             source: AuthorizedUser { client_id: \"123.apps.googleusercontent.com\", .. }, .. }"
        );
    }

    #[test]
    fn bad_configurations_are_named_without_secrets() {
        let cases: [(&str, Change); 7] = [
            ("`source_credentials` are missing", |v| {
                v.as_object_mut().unwrap().remove("source_credentials");
            }),
            (
                "`source_credentials`: credentials of type `external_account` are not \
                 supported (supported: `authorized_user`, `service_account`)",
                |v| v["source_credentials"]["type"] = "external_account".into(),
            ),
            (
                "`source_credentials`: the `authorized_user` credentials' `client_secret` is \
                 missing",
                |v| v["source_credentials"]["client_secret"] = Value::Null,
            ),
            (
                "`service_account_impersonation_url` does not name a service account",
                |v| {
                    v["service_account_impersonation_url"] =
                        "https://iamcredentials.googleapis.com/v1/x".into();
                },
            ),
            (
                "`service_account_impersonation_url` must be an https URL",
                |v| {
                    v["service_account_impersonation_url"] =
                        "http://example.com/sa@p:generateAccessToken".into();
                },
            ),
            ("`delegates` is not an array of strings", |v| {
                v["delegates"] = "a@p".into()
            }),
            ("`service_account_impersonation_url` is missing", |v| {
                v.as_object_mut()
                    .unwrap()
                    .remove("service_account_impersonation_url");
            }),
        ];
        for (expected, change) in cases {
            let err = parse_with(change).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(err.message().contains(expected), "{expected}: {err}");
            assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
        }
    }
}
