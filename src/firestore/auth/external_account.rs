//! Tokens through Workload Identity Federation (`"type": "external_account"`): a token of
//! another identity provider (the subject token, see `subject_token.rs`) is exchanged at
//! Google's Security Token Service (RFC 8693 token exchange) for a Google access token, which
//! IAM may then exchange for a service account's (`service_account_impersonation_url`).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use super::cache::{FetchToken, FetchedToken};
use super::fields::Fields;
use super::http::{Http, is_loopback, read_token_answer};
use super::impersonation::{Impersonation, lifetime_from};
use super::source::{CLOUD_PLATFORM_SCOPE, SCOPE};
use super::subject_token::SubjectTokenSource;
use crate::error::Result;

/// Google's STS, where a configuration without `token_url` exchanges its subject tokens.
const DEFAULT_TOKEN_URL: &str = "https://sts.googleapis.com/v1/token";
/// The OAuth grant of a token exchange (RFC 8693).
const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// What the exchange asks for: an access token.
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// Parts of a subject token shorter than this are not scrubbed from messages on their own:
/// they would match ordinary words.
const MIN_SCRUBBED_PART: usize = 8;

/// A Workload Identity Federation configuration.
pub(super) struct ExternalAccountSource {
    audience: String,
    subject_token_type: String,
    token_url: String,
    subject: SubjectTokenSource,
    /// `client_id` and `client_secret`, sent as HTTP basic authentication when present.
    client: Option<(String, String)>,
    /// A workforce pool's `workforce_pool_user_project`, sent as the STS `options`.
    user_project: Option<String>,
    impersonation: Option<Impersonation>,
    agent: crate::firestore::transport::Agent,
}

impl ExternalAccountSource {
    /// The configuration in `value`, whose `type` is `external_account`.
    pub(super) fn from_value(value: &Value, http: &Http) -> Result<ExternalAccountSource> {
        let fields = Fields::new(value, "external_account");
        let audience = fields.string("audience")?;
        let subject_token_type = fields.string("subject_token_type")?;
        let token_url = fields
            .optional_string("token_url")?
            .unwrap_or_else(|| DEFAULT_TOKEN_URL.to_owned());
        let url = fields.endpoint("token_url", &token_url)?;
        let source = fields
            .object("credential_source")?
            .ok_or_else(|| fields.invalid("credential_source", "is missing (an object)"))?;
        let subject = SubjectTokenSource::from_fields(&source, http)?;
        let client_id = fields.optional_string("client_id")?;
        let client_secret = fields.optional_string("client_secret")?;
        let client = client_id.map(|id| (id, client_secret.unwrap_or_default()));
        let user_project = fields.optional_string("workforce_pool_user_project")?;
        if user_project.is_some() && !is_workforce_pool(&audience) {
            return Err(fields.invalid(
                "workforce_pool_user_project",
                "is set, but the `audience` is not a workforce pool's",
            ));
        }
        // With client authentication the client id says which project to bill; Google's
        // libraries then leave the user project out.
        let user_project = user_project.filter(|_| client.is_none());
        let impersonation = match fields.optional_string("service_account_impersonation_url")? {
            Some(url) => Some(Impersonation::new(
                &fields,
                url,
                Vec::new(),
                lifetime_from(&fields)?,
                http,
            )?),
            None => None,
        };
        Ok(ExternalAccountSource {
            audience,
            subject_token_type,
            token_url,
            subject,
            client,
            user_project,
            impersonation,
            // A proxy cannot reach an endpoint on this machine (a test double).
            agent: http.agent(is_loopback(&url)),
        })
    }

    /// Exchanges `subject_token` at the STS for a token for `scope`.
    fn exchange(&self, subject_token: &str, scope: &str) -> Result<FetchedToken> {
        let what = format!("the STS token endpoint {}", self.token_url);
        let options = self
            .user_project
            .as_ref()
            .map(|project| serde_json::json!({ "userProject": project }).to_string());
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE_GRANT),
            ("audience", self.audience.as_str()),
            ("scope", scope),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("subject_token", subject_token),
            ("subject_token_type", self.subject_token_type.as_str()),
        ];
        if let Some(options) = &options {
            form.push(("options", options.as_str()));
        }
        let mut request = self
            .agent
            .post(&self.token_url)
            .header("Accept", "application/json");
        let mut secrets = vec![subject_token];
        secrets.extend(
            subject_token
                .split('.')
                .filter(|part| part.len() >= MIN_SCRUBBED_PART),
        );
        let basic = self.client.as_ref().map(|(id, secret)| {
            // Google's libraries send the id and secret as they are, not form-encoded first.
            STANDARD.encode(format!("{id}:{secret}"))
        });
        if let (Some((_, secret)), Some(basic)) = (&self.client, &basic) {
            request = request.header("Authorization", &format!("Basic {basic}"));
            // An endpoint that quotes the header gives the secret away as surely as one that
            // quotes the secret.
            secrets.extend([secret.as_str(), basic.as_str()]);
        }
        read_token_answer(&what, request.send_form(form), &secrets, "")
    }
}

/// Whether `audience` names a workforce pool
/// (`//iam.googleapis.com/locations/LOCATION/workforcePools/…`) rather than a workload one.
fn is_workforce_pool(audience: &str) -> bool {
    audience
        .strip_prefix("//iam.googleapis.com/locations/")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(location, rest)| !location.is_empty() && rest.starts_with("workforcePools/"))
}

impl FetchToken for ExternalAccountSource {
    fn fetch(&self) -> Result<FetchedToken> {
        let subject_token = self.subject.fetch()?;
        match &self.impersonation {
            // IAM wants a token that may call IAM; the service account's gets Firestore's scope.
            Some(impersonation) => {
                let federated = self.exchange(&subject_token, CLOUD_PLATFORM_SCOPE)?;
                impersonation.generate(&federated.access_token, SCOPE)
            }
            None => self.exchange(&subject_token, SCOPE),
        }
    }
}

impl fmt::Debug for ExternalAccountSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ExternalAccount");
        d.field("audience", &self.audience)
            .field("credential_source", &self.subject);
        if let Some(impersonation) = &self.impersonation {
            d.field("service_account", &impersonation.service_account());
        }
        d.finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use serde_json::json;

    const WORKLOAD: &str = "//iam.googleapis.com/projects/123/locations/global/\
                            workloadIdentityPools/pool/providers/provider";
    const WORKFORCE: &str = "//iam.googleapis.com/locations/global/workforcePools/pool/\
                             providers/provider";

    fn account() -> Value {
        json!({
            "type": "external_account",
            "audience": WORKLOAD,
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "credential_source": { "file": "/var/run/token" },
        })
    }

    /// A change to otherwise valid credentials.
    type Change = fn(&mut Value);

    fn parse_with(change: impl FnOnce(&mut Value)) -> Result<ExternalAccountSource> {
        let mut value = account();
        change(&mut value);
        ExternalAccountSource::from_value(&value, &Http::for_tests())
    }

    #[test]
    fn defaults_and_debug() {
        let source = parse_with(|_| {}).unwrap();
        assert_eq!(source.token_url, DEFAULT_TOKEN_URL);
        assert!(source.client.is_none() && source.impersonation.is_none());
        assert_eq!(
            format!("{source:?}"),
            format!("ExternalAccount {{ audience: {WORKLOAD:?}, credential_source: file, .. }}")
        );
        let impersonating = parse_with(|v| {
            v["service_account_impersonation_url"] =
                "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/\
                 sa@p.iam.gserviceaccount.com:generateAccessToken"
                    .into();
            v["client_id"] = "client".into();
            v["client_secret"] = "hunter2".into();
        })
        .unwrap();
        let shown = format!("{impersonating:?}");
        assert!(
            shown.ends_with("service_account: \"sa@p.iam.gserviceaccount.com\", .. }"),
            "{shown}"
        );
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn workforce_user_projects_go_only_with_workforce_pools_and_without_a_client() {
        assert!(is_workforce_pool(WORKFORCE));
        assert!(!is_workforce_pool(WORKLOAD));
        assert!(!is_workforce_pool(
            "//iam.googleapis.com/locations//workforcePools/p"
        ));
        let source = parse_with(|v| {
            v["audience"] = WORKFORCE.into();
            v["workforce_pool_user_project"] = "billing-project".into();
        })
        .unwrap();
        assert_eq!(source.user_project.as_deref(), Some("billing-project"));
        let with_client = parse_with(|v| {
            v["audience"] = WORKFORCE.into();
            v["workforce_pool_user_project"] = "billing-project".into();
            v["client_id"] = "client".into();
        })
        .unwrap();
        assert_eq!(with_client.user_project, None);
        let err = parse_with(|v| v["workforce_pool_user_project"] = "p".into())
            .err()
            .unwrap();
        assert!(
            err.message()
                .contains("`workforce_pool_user_project` is set, but the `audience` is not"),
            "{err}"
        );
    }

    #[test]
    fn bad_configurations_are_named() {
        let cases: [(&str, Change); 6] = [
            ("`audience` is missing", |v| v["audience"] = Value::Null),
            ("`subject_token_type` is missing", |v| {
                v["subject_token_type"] = "".into()
            }),
            ("`token_url` must be an https URL", |v| {
                v["token_url"] = "http://sts.example.com/v1/token".into()
            }),
            ("`credential_source` is missing", |v| {
                v.as_object_mut().unwrap().remove("credential_source");
            }),
            ("`credential_source.environment_id` is set: AWS", |v| {
                v["credential_source"] = json!({ "environment_id": "aws1" })
            }),
            (
                "`service_account_impersonation.token_lifetime_seconds` is not a number of \
                 seconds from 600 to 43200",
                |v| {
                    v["service_account_impersonation_url"] =
                        "https://iam.example.com/sa@p:generateAccessToken".into();
                    v["service_account_impersonation"] = json!({ "token_lifetime_seconds": 60 });
                },
            ),
        ];
        for (expected, change) in cases {
            let err = parse_with(change).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(err.message().contains(expected), "{expected}: {err}");
        }
    }
}
