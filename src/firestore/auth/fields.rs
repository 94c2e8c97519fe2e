//! Reading credentials JSON: the file, its one object, its `type`, and its fields by path.
//!
//! Everything here is parsed as a plain [`Value`] rather than into structs: serde's type
//! errors quote the offending value, which could be a key or a refresh token. Messages name
//! the file and the field at fault, never a value.

use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

use super::http::check_secret_endpoint;
use crate::error::{LockError, Result};

/// The error for credentials whose `type` is missing or not one of `supported`.
pub(super) fn unsupported_type(kind: Option<&str>, supported: &str) -> LockError {
    match kind {
        // Named only when it looks like a type name: the field could hold anything.
        Some(kind) if is_type_name(kind) => LockError::invalid_argument(format!(
            "credentials of type `{kind}` are not supported (supported: {supported})"
        )),
        Some(_) => LockError::invalid_argument(format!(
            "the credentials' `type` is not one of {supported}"
        )),
        None => LockError::invalid_argument(format!(
            "the credentials have no `type` (one of {supported})"
        )),
    }
}

pub(super) fn is_type_name(kind: &str) -> bool {
    (1..=64).contains(&kind.len())
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Reads a credentials file; the error names `what` and the path, never the contents.
pub(super) fn read_credentials_file(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| {
        // The I/O error says why (not found, permission denied, not UTF-8), nothing more.
        LockError::invalid_argument(format!("could not read {what} {}: {e}", path.display()))
    })
}

/// Parses `json`, which must be an object; `what` names it in messages.
pub(super) fn parse_object(json: &str, what: &str) -> Result<Value> {
    let value: Value = serde_json::from_str(json).map_err(|e| {
        LockError::invalid_argument(format!(
            "{what} is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    if !value.is_object() {
        return Err(LockError::invalid_argument(format!(
            "{what} is not a JSON object"
        )));
    }
    Ok(value)
}

/// The `type` of credentials JSON.
pub(super) fn type_of(value: &Value) -> Option<&str> {
    value.get("type").and_then(Value::as_str)
}

/// The fields of one object in credentials JSON, for messages that name the kind of
/// credentials and the field's path (`credential_source.format.type`).
pub(super) struct Fields<'a> {
    map: Option<&'a Map<String, Value>>,
    kind: &'a str,
    path: String,
}

impl<'a> Fields<'a> {
    /// The top-level fields of `value`, credentials of type `kind`.
    pub(super) fn new(value: &'a Value, kind: &'a str) -> Fields<'a> {
        Fields {
            map: value.as_object(),
            kind,
            path: String::new(),
        }
    }

    /// How messages name a field: "the `external_account` credentials' `token_url`".
    pub(super) fn subject(&self, name: &str) -> String {
        format!("the `{}` credentials' `{}{name}`", self.kind, self.path)
    }

    /// The error for a field: "the `external_account` credentials' `token_url` {problem}".
    pub(super) fn invalid(&self, name: &str, problem: impl fmt::Display) -> LockError {
        LockError::invalid_argument(format!("{} {problem}", self.subject(name)))
    }

    /// The endpoint in string field `value` of field `name`, checked as an endpoint that is
    /// sent a secret (see [`check_secret_endpoint`]).
    pub(super) fn endpoint(&self, name: &str, value: &str) -> Result<url::Url> {
        check_secret_endpoint(&self.subject(name), value)
    }

    /// Whether the field is present (even if null).
    pub(super) fn has(&self, name: &str) -> bool {
        self.map.is_some_and(|map| map.contains_key(name))
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map?.get(name).filter(|value| !value.is_null())
    }

    /// A required, non-empty string, trimmed.
    pub(super) fn string(&self, name: &str) -> Result<String> {
        self.optional_string(name)?
            .ok_or_else(|| self.invalid(name, "is missing (a non-empty string)"))
    }

    /// A string that may be absent or null (`None`), trimmed; empty counts as absent.
    pub(super) fn optional_string(&self, name: &str) -> Result<Option<String>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(text)) => {
                Ok(Some(text.trim().to_owned()).filter(|text| !text.is_empty()))
            }
            Some(_) => Err(self.invalid(name, "is not a string")),
        }
    }

    /// A string field that is a secret: required and non-empty, kept as written.
    pub(super) fn secret(&self, name: &str) -> Result<String> {
        match self.get(name) {
            Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
            Some(Value::String(_)) | None => {
                Err(self.invalid(name, "is missing (a non-empty string)"))
            }
            Some(_) => Err(self.invalid(name, "is not a string")),
        }
    }

    /// An object that may be absent or null.
    pub(super) fn object(&self, name: &str) -> Result<Option<Fields<'a>>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Fields {
                map: Some(map),
                kind: self.kind,
                path: format!("{}{name}.", self.path),
            })),
            Some(_) => Err(self.invalid(name, "is not an object")),
        }
    }

    /// A raw value that may be absent or null.
    pub(super) fn value(&self, name: &str) -> Option<&'a Value> {
        self.get(name)
    }

    /// An array of strings that may be absent or null (empty).
    pub(super) fn strings(&self, name: &str) -> Result<Vec<String>> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item.as_str().map(str::trim) {
                    Some(text) if !text.is_empty() => Ok(text.to_owned()),
                    _ => Err(self.invalid(name, "holds something other than non-empty strings")),
                })
                .collect(),
            Some(_) => Err(self.invalid(name, "is not an array of strings")),
        }
    }

    /// The object's field names (header names, for instance).
    pub(super) fn entries(&self) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.map.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn credentials_json_must_be_an_object() {
        crate::error::assert_refused_without_secret(
            &[
                "{\"refresh_token\": \"hunter2\"",
                "\"hunter2\"",
                "[\"hunter2\"]",
            ],
            |json| parse_object(json, "the credentials JSON"),
        );
    }

    #[test]
    fn fields_name_the_kind_and_the_path() {
        let value = json!({
            "a": "  text ", "empty": "", "n": 1, "o": { "b": 2, "list": ["x", ""] },
        });
        let fields = Fields::new(&value, "external_account");
        assert_eq!(fields.string("a").unwrap(), "text");
        assert_eq!(fields.optional_string("empty").unwrap(), None);
        assert_eq!(fields.optional_string("absent").unwrap(), None);
        let message = |err: LockError| err.message().to_owned();
        assert_eq!(
            message(fields.string("empty").unwrap_err()),
            "the `external_account` credentials' `empty` is missing (a non-empty string)"
        );
        assert_eq!(
            message(fields.string("n").unwrap_err()),
            "the `external_account` credentials' `n` is not a string"
        );
        let nested = fields.object("o").unwrap().unwrap();
        assert_eq!(
            message(nested.string("b").unwrap_err()),
            "the `external_account` credentials' `o.b` is not a string"
        );
        assert_eq!(
            message(nested.strings("list").unwrap_err()),
            "the `external_account` credentials' `o.list` holds something other than \
             non-empty strings"
        );
        assert!(fields.object("a").is_err());
        assert!(fields.object("absent").unwrap().is_none());
    }
}
