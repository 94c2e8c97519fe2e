//! Credentials JSON as Google's tools write it — a service-account key, what
//! `gcloud auth application-default login` writes, a Workload Identity Federation
//! configuration — read from a file or a string, and turned into the kind of credentials its
//! `type` names.
//!
//! Reading the JSON itself, field by field and without quoting values, is `fields.rs`.

use std::path::Path;

use serde_json::Value;

use super::authorized_user::AuthorizedUserSource;
use super::cache::Cached;
use super::external_account::ExternalAccountSource;
use super::fields::{
    Fields, is_type_name, parse_object, read_credentials_file, type_of, unsupported_type,
};
use super::http::Http;
use super::impersonated::ImpersonatedSource;
use super::impersonation::target_principal;
use super::service_account::ServiceAccountSource;
use super::source::{SCOPE, TokenSource};
use crate::error::{LockError, Result};

/// The `type`s [`load_json`] understands, for messages.
const SUPPORTED_TYPES: &str =
    "`service_account`, `authorized_user`, `external_account`, `impersonated_service_account`";

/// Credentials ready to use, and the project their file names for quota and billing.
pub(super) struct Loaded {
    pub(super) source: Box<dyn TokenSource>,
    pub(super) quota_project_id: Option<String>,
}

/// Reads the credentials file at `path`, of any supported type. `what` names the file in
/// messages, which then give its path, never its contents.
pub(super) fn load_file(path: &Path, what: &str, http: &Http) -> Result<Loaded> {
    let json = read_credentials_file(path, what)?;
    load_json(&json, http).map_err(|e| {
        LockError::new(
            e.code(),
            format!("{what} {}: {}", path.display(), e.message()),
        )
    })
}

/// The credentials in `json`, of any supported type.
pub(super) fn load_json(json: &str, http: &Http) -> Result<Loaded> {
    let value = parse_object(json, "the credentials JSON")?;
    let kind = type_of(&value);
    let source = match kind {
        Some("service_account") => {
            Cached::boxed(ServiceAccountSource::from_value(&value, SCOPE, http)?)
        }
        Some("authorized_user") => Cached::boxed(AuthorizedUserSource::from_value(&value, http)?),
        Some("external_account") => Cached::boxed(ExternalAccountSource::from_value(&value, http)?),
        Some("impersonated_service_account") => {
            Cached::boxed(ImpersonatedSource::from_value(&value, http)?)
        }
        kind => return Err(unsupported_type(kind, SUPPORTED_TYPES)),
    };
    let quota_project_id =
        Fields::new(&value, kind.unwrap_or_default()).optional_string("quota_project_id")?;
    Ok(Loaded {
        source,
        quota_project_id,
    })
}

/// What `Debug` may show of credentials JSON: its `type` and the identifiers that say whose
/// credentials they are without granting anything — a service account's e-mail address, an
/// OAuth client id (public: it appears in every consent URL), a workload identity pool.
pub(super) fn identifiers(value: &Value) -> Vec<(&'static str, String)> {
    let text = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_owned);
    let mut shown = Vec::new();
    let kind = type_of(value).filter(|kind| is_type_name(kind));
    if let Some(kind) = kind {
        shown.push(("type", kind.to_owned()));
    }
    let fields: &[(&'static str, &str)] = match kind {
        Some("service_account") => &[("client_email", "client_email")],
        Some("authorized_user") => &[("client_id", "client_id")],
        Some("external_account") => &[("audience", "audience")],
        _ => &[],
    };
    for (shown_as, name) in fields {
        if let Some(value) = text(name) {
            shown.push((shown_as, value));
        }
    }
    if matches!(
        kind,
        Some("external_account" | "impersonated_service_account")
    ) {
        let principal = text("service_account_impersonation_url")
            .as_deref()
            .and_then(target_principal)
            .map(str::to_owned);
        if let Some(principal) = principal {
            shown.push(("service_account", principal));
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use serde_json::json;

    fn load(value: Value) -> Result<Loaded> {
        load_json(&value.to_string(), &Http::for_tests())
    }

    #[test]
    fn unsupported_and_missing_types_are_named_when_they_look_like_types() {
        for (kind, expected) in [
            (
                json!("gdch_service_account"),
                "credentials of type `gdch_service_account` are not supported (supported: \
                 `service_account`, `authorized_user`, `external_account`, \
                 `impersonated_service_account`)",
            ),
            (
                json!("external_account_authorized_user"),
                "credentials of type `external_account_authorized_user` are not supported",
            ),
            (
                json!("hunter2 is a secret"),
                "the credentials' `type` is not one of",
            ),
            (json!(42), "the credentials have no `type`"),
            (Value::Null, "the credentials have no `type`"),
        ] {
            let err = load(json!({ "type": kind, "refresh_token": "hunter2" }))
                .err()
                .unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument);
            assert!(err.message().contains(expected), "{err}");
            assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
        }
    }
}
