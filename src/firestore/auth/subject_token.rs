//! Where `external_account` credentials get the token of the other identity provider that
//! Google's STS exchanges (`credential_source`): a file (a Kubernetes projected service-account
//! token, say) or a URL (Azure's instance metadata, say), read whole as text or as JSON with
//! the token in one field. Read afresh for every exchange: such tokens rotate.
//!
//! AWS (`environment_id`), executable and X.509 certificate sources are refused, by name.

use std::fmt;
use std::io::Read as _;
use std::path::PathBuf;

use serde_json::Value;

use super::fields::Fields;
use super::http::{Http, is_header_safe, is_local, read_answer};
use crate::error::{ErrorCode, LockError, Result};

/// The most of a subject token file that is read.
const MAX_TOKEN_BYTES: u64 = 1 << 20;

/// How the subject token is written.
#[derive(Debug, PartialEq)]
pub(super) enum Format {
    /// The whole content.
    Text,
    /// A JSON object, the token in this field.
    Json(String),
}

/// Where the subject token comes from.
pub(super) enum SubjectTokenSource {
    File {
        path: PathBuf,
        format: Format,
    },
    Url {
        url: String,
        /// The URL without its query, for messages.
        shown: String,
        headers: Vec<(String, String)>,
        format: Format,
        agent: crate::firestore::transport::Agent,
    },
}

impl SubjectTokenSource {
    /// The source `source` (the `credential_source` object) describes.
    pub(super) fn from_fields(source: &Fields<'_>, http: &Http) -> Result<SubjectTokenSource> {
        for (field, what) in [
            ("environment_id", "AWS credential sources"),
            ("executable", "executable-sourced credentials"),
            ("certificate", "X.509 certificate-sourced credentials"),
        ] {
            if source.has(field) {
                return Err(source.invalid(
                    field,
                    format_args!(
                        "is set: {what} are not supported (only `file` and `url` sources are)"
                    ),
                ));
            }
        }
        let format = format_of(source)?;
        let file = source.optional_string("file")?;
        let url = source.optional_string("url")?;
        match (file, url) {
            (Some(_), Some(_)) => Err(source.invalid(
                "file",
                "and `url` are both set: a subject token comes from one or the other",
            )),
            (None, None) => Err(source.invalid("file", "and `url` are both missing")),
            (Some(path), None) => Ok(SubjectTokenSource::File {
                path: PathBuf::from(path),
                format,
            }),
            (None, Some(url)) => {
                let parsed = url::Url::parse(&url)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                    .ok_or_else(|| source.invalid("url", "is not an http or https URL"))?;
                let mut shown = parsed.clone();
                shown.set_query(None);
                shown.set_fragment(None);
                Ok(SubjectTokenSource::Url {
                    headers: headers_of(source)?,
                    shown: shown.to_string(),
                    format,
                    // A link-local metadata service is out of any proxy's reach.
                    agent: http.agent(is_local(&parsed)),
                    url,
                })
            }
        }
    }

    /// Reads the subject token now. Failures are `AuthFailed`, or what the URL's answer says
    /// (`ServiceUnavailable`, `RateLimited`, `NetworkTimeout`); messages never quote content.
    pub(super) fn fetch(&self) -> Result<String> {
        match self {
            SubjectTokenSource::File { path, format } => {
                let what = format!("the subject token file {}", path.display());
                let mut content = Vec::new();
                std::fs::File::open(path)
                    .and_then(|file| file.take(MAX_TOKEN_BYTES).read_to_end(&mut content))
                    .map_err(|e| {
                        LockError::new(ErrorCode::AuthFailed, format!("could not read {what}: {e}"))
                    })?;
                token_in(&what, &content, format)
            }
            SubjectTokenSource::Url {
                url,
                shown,
                headers,
                format,
                agent,
            } => {
                let what = format!("the subject token URL {shown}");
                let mut request = agent.get(url);
                for (name, value) in headers {
                    request = request.header(name.as_str(), value.as_str());
                }
                let secrets: Vec<&str> = headers.iter().map(|(_, value)| value.as_str()).collect();
                let body = read_answer(&what, request.call(), &secrets, "")?;
                token_in(&what, &body, format)
            }
        }
    }

    /// `file` or `url`, for `Debug`.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            SubjectTokenSource::File { .. } => "file",
            SubjectTokenSource::Url { .. } => "url",
        }
    }
}

/// `credential_source.format`: `{"type": "text"}` (the default) or `{"type": "json",
/// "subject_token_field_name": …}`.
fn format_of(source: &Fields<'_>) -> Result<Format> {
    let Some(format) = source.object("format")? else {
        return Ok(Format::Text);
    };
    match format.optional_string("type")?.as_deref() {
        None | Some("text") => Ok(Format::Text),
        Some("json") => Ok(Format::Json(format.string("subject_token_field_name")?)),
        Some(_) => Err(format.invalid("type", "is neither `text` nor `json`")),
    }
}

/// `credential_source.headers`: names and values an HTTP header can carry.
fn headers_of(source: &Fields<'_>) -> Result<Vec<(String, String)>> {
    let Some(headers) = source.object("headers")? else {
        return Ok(Vec::new());
    };
    headers
        .entries()
        .map(|(name, value)| {
            let is_token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !is_token {
                return Err(source.invalid("headers", "has a name that is not an HTTP header name"));
            }
            // The value may be a secret: the message names the header, not the value.
            match value.as_str() {
                Some(text) if text.split(' ').all(is_header_safe) => {
                    Ok((name.clone(), text.to_owned()))
                }
                _ => Err(headers.invalid(name, "is not a string an HTTP header can carry")),
            }
        })
        .collect()
}

/// The subject token in `content`, read from `what`.
fn token_in(what: &str, content: &[u8], format: &Format) -> Result<String> {
    let failed = |problem: &str| LockError::new(ErrorCode::AuthFailed, format!("{what} {problem}"));
    let token = match format {
        Format::Text => std::str::from_utf8(content)
            .map_err(|_| failed("is not UTF-8 text"))?
            .to_owned(),
        Format::Json(field) => {
            let value: Value =
                serde_json::from_slice(content).map_err(|_| failed("does not hold JSON"))?;
            value
                .get(field)
                .and_then(Value::as_str)
                .ok_or_else(|| failed(&format!("has no string field `{field}`")))?
                .to_owned()
        }
    };
    // A trailing newline is an accident of how the file was written, never part of a token.
    let token = token.trim();
    if token.is_empty() {
        return Err(failed("holds no subject token"));
    }
    Ok(token.to_owned())
}

impl fmt::Debug for SubjectTokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source(credential_source: Value) -> Result<SubjectTokenSource> {
        let value = json!({ "credential_source": credential_source });
        let fields = Fields::new(&value, "external_account");
        let source = fields.object("credential_source").unwrap().unwrap();
        SubjectTokenSource::from_fields(&source, &Http::for_tests())
    }

    #[test]
    fn formats_and_sources_are_read() {
        let file = source(json!({ "file": "/var/run/token" })).unwrap();
        assert!(matches!(
            &file,
            SubjectTokenSource::File { path, format: Format::Text } if path == &PathBuf::from("/var/run/token")
        ));
        let url = source(json!({
            "url": "http://169.254.169.254/token?api-version=1&secret=hunter2",
            "headers": { "Metadata": "True" },
            "format": { "type": "json", "subject_token_field_name": "access_token" },
        }))
        .unwrap();
        let SubjectTokenSource::Url {
            shown,
            headers,
            format,
            ..
        } = &url
        else {
            panic!("not a URL source: {url:?}");
        };
        assert_eq!(shown, "http://169.254.169.254/token");
        assert_eq!(headers, &[("Metadata".to_owned(), "True".to_owned())]);
        assert_eq!(format, &Format::Json("access_token".to_owned()));
        assert_eq!(format!("{file:?} {url:?}"), "file url");
    }

    #[test]
    fn unsupported_or_bad_sources_are_named() {
        for (credential_source, expected) in [
            (
                json!({ "environment_id": "aws1", "region_url": "x" }),
                "`credential_source.environment_id` is set: AWS credential sources are not \
                 supported",
            ),
            (
                json!({ "executable": { "command": "x" } }),
                "`credential_source.executable` is set: executable-sourced credentials are not",
            ),
            (
                json!({ "certificate": {} }),
                "`credential_source.certificate` is set: X.509",
            ),
            (
                json!({ "file": "/a", "url": "https://b" }),
                "`credential_source.file` and `url` are both set",
            ),
            (
                json!({}),
                "`credential_source.file` and `url` are both missing",
            ),
            (
                json!({ "url": "ftp://x/" }),
                "`credential_source.url` is not an http",
            ),
            (
                json!({ "file": "/a", "format": { "type": "xml" } }),
                "`credential_source.format.type` is neither",
            ),
            (
                json!({ "file": "/a", "format": { "type": "json" } }),
                "`credential_source.format.subject_token_field_name` is missing",
            ),
            (
                json!({ "url": "https://b", "headers": { "Authorization": "Bearer hunter2\r\nX: y" } }),
                "`credential_source.headers.Authorization` is not a string",
            ),
            (
                json!({ "url": "https://b", "headers": { "Bad Name": "hunter2" } }),
                "`credential_source.headers` has a name that is not",
            ),
        ] {
            let err = source(credential_source).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(err.message().contains(expected), "{expected}: {err}");
            assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
        }
    }

    #[test]
    fn tokens_are_found_in_text_and_json_without_quoting_content() {
        let text = Format::Text;
        let json = Format::Json("id_token".to_owned());
        assert_eq!(
            token_in("f", b"eyJ.token.sig\n", &text).unwrap(),
            "eyJ.token.sig"
        );
        assert_eq!(
            token_in("f", br#"{"id_token":"eyJ.token.sig"}"#, &json).unwrap(),
            "eyJ.token.sig"
        );
        for (content, format, expected) in [
            (&b" \n"[..], &text, "f holds no subject token"),
            (b"\xff\xfehunter2", &text, "f is not UTF-8 text"),
            (b"hunter2", &json, "f does not hold JSON"),
            (
                br#"{"other":"hunter2"}"#,
                &json,
                "f has no string field `id_token`",
            ),
            (
                br#"{"id_token":["hunter2"]}"#,
                &json,
                "f has no string field `id_token`",
            ),
        ] {
            let err = token_in("f", content, format).unwrap_err();
            assert_eq!(err.code(), ErrorCode::AuthFailed);
            assert_eq!(err.message(), expected);
        }
    }
}
