//! Tokens for a service account from its key (`"type": "service_account"`, and
//! [`Credentials::ServiceAccountJson`](super::Credentials::ServiceAccountJson) /
//! [`ServiceAccountFile`](super::Credentials::ServiceAccountFile)): the key signs a one-hour JWT
//! assertion (RS256) that the key's `token_uri` exchanges for an access token (RFC 7523).

use std::fmt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::crypto::JwtSigner;
use jsonwebtoken::signature::{self, Signer as _};
use jsonwebtoken::{Algorithm, Header};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::Value;

use super::cache::{FetchToken, FetchedToken};
use super::fields::{parse_object, read_credentials_file, type_of};
use super::http::{Http, check_secret_endpoint, is_loopback, read_token_answer};
use crate::error::{LockError, Result};

/// The OAuth grant that exchanges a signed JWT for an access token (RFC 7523).
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// How long an assertion is valid; Google accepts at most one hour.
const ASSERTION_LIFETIME_SECS: u64 = 3600;

/// The parts of a service-account key file this crate uses.
struct ServiceAccountKey {
    client_email: String,
    private_key_id: String,
    token_uri: String,
    signer: Rs256Signer,
}

impl ServiceAccountKey {
    /// Parses and checks a key file's JSON, which must say `"type": "service_account"`.
    /// Messages name the field at fault, never a value that could be part of the key.
    fn parse(json: &str) -> Result<ServiceAccountKey> {
        let value = parse_object(json, "the service-account key")?;
        match type_of(&value) {
            Some("service_account") => ServiceAccountKey::from_value(&value),
            Some(
                kind @ ("authorized_user" | "external_account" | "impersonated_service_account"),
            ) => Err(LockError::invalid_argument(format!(
                "the credentials are of type `{kind}`, not a service-account key: pass them as \
                 `Credentials::Json` or `Credentials::File`"
            ))),
            _ => Err(LockError::invalid_argument(
                "the credentials JSON is not a service-account key (its `type` is not \
                 `service_account`)",
            )),
        }
    }

    /// Checks a key whose `type` has been checked. Messages name the field at fault, never a
    /// value that could be part of the key.
    fn from_value(value: &Value) -> Result<ServiceAccountKey> {
        let field = |name: &str| -> Result<String> {
            match value.get(name).and_then(Value::as_str).map(str::trim) {
                Some(text) if !text.is_empty() => Ok(text.to_owned()),
                _ => Err(LockError::invalid_argument(format!(
                    "the service-account key has no `{name}` (a non-empty string)"
                ))),
            }
        };
        let client_email = field("client_email")?;
        let private_key_id = field("private_key_id")?;
        let token_uri = field("token_uri")?;
        check_secret_endpoint("the service-account `token_uri`", &token_uri)?;
        let pem = field("private_key")?;
        let signer = Rs256Signer::from_pem(&pem)?;
        Ok(ServiceAccountKey {
            client_email,
            private_key_id,
            token_uri,
            signer,
        })
    }

    /// The signed JWT asking for a token for `scope`, issued at `now` (Unix seconds).
    fn assertion(&self, now: u64, scope: &str) -> Result<String> {
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            iss: &'a str,
            scope: &'a str,
            aud: &'a str,
            iat: u64,
            exp: u64,
        }
        let mut header = Header::new(self.signer.algorithm());
        header.kid = Some(self.private_key_id.clone());
        let claims = Claims {
            iss: &self.client_email,
            scope,
            aud: &self.token_uri,
            iat: now,
            exp: now.saturating_add(ASSERTION_LIFETIME_SECS),
        };
        // JWS compact serialisation (RFC 7515 §7.1), as `jsonwebtoken::encode` builds it; that
        // function signs with the process-wide provider only, which a library must not choose.
        let unsigned = format!("{}.{}", json_part(&header)?, json_part(&claims)?);
        let signature = self.signer.try_sign(unsigned.as_bytes()).map_err(|_| {
            LockError::invalid_argument("the service-account key could not sign an assertion")
        })?;
        Ok(format!("{unsigned}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

/// One part of a JWT: the value as JSON, in base64url without padding.
fn json_part(value: &impl serde::Serialize) -> Result<String> {
    let json = serde_json::to_vec(value)
        .map_err(|_| LockError::internal("a JWT part could not be written as JSON"))?;
    Ok(URL_SAFE_NO_PAD.encode(json))
}

/// RS256 (RSASSA-PKCS1-v1_5 with SHA-256) with *ring*, which rustls already brings, behind
/// jsonwebtoken's signer trait.
///
/// jsonwebtoken's own backends are no option: `rust_crypto` pulls in `rsa` (RUSTSEC-2023-0071,
/// no fixed release) and some sixty crates, `aws_lc_rs` a second C crypto library; and either
/// one is chosen for the whole process (`CryptoProvider::install_default`), which a library
/// must leave to the application. This signer is passed where it is needed and touches no
/// process-wide state.
struct Rs256Signer {
    key: RsaKeyPair,
    rng: SystemRandom,
}

impl Rs256Signer {
    /// The RSA key in a PEM `PRIVATE KEY` (PKCS#8, as Google issues them) or
    /// `RSA PRIVATE KEY` (PKCS#1) section. Messages never quote the PEM.
    fn from_pem(pem: &str) -> Result<Rs256Signer> {
        let not_rsa_pem = || {
            LockError::invalid_argument(
                "the service-account `private_key` is not an RSA private key in PEM form",
            )
        };
        // The PEM parser's errors may quote a line of the input: none is passed on.
        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| not_rsa_pem())?;
        let key = match &der {
            PrivateKeyDer::Pkcs8(der) => RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()),
            PrivateKeyDer::Pkcs1(der) => RsaKeyPair::from_der(der.secret_pkcs1_der()),
            _ => return Err(not_rsa_pem()),
        };
        // ring checks the whole key here (its parts are consistent, at least 2048 bits), so a
        // bad key fails now rather than on the first lock operation. Its reasons are fixed
        // words ("InvalidEncoding", "TooSmall"), never key material.
        let key = key.map_err(|rejected| {
            LockError::invalid_argument(format!(
                "the service-account `private_key` cannot sign: it is not a valid RSA key \
                 ({rejected})"
            ))
        })?;
        Ok(Rs256Signer {
            key,
            rng: SystemRandom::new(),
        })
    }
}

impl signature::Signer<Vec<u8>> for Rs256Signer {
    fn try_sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, signature::Error> {
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(&RSA_PKCS1_SHA256, &self.rng, message, &mut signature)
            .map_err(|_| signature::Error::new())?;
        Ok(signature)
    }
}

impl JwtSigner for Rs256Signer {
    fn algorithm(&self) -> Algorithm {
        Algorithm::RS256
    }
}

/// Unix time in whole seconds.
fn unix_now() -> Result<u64> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .map_err(|_| LockError::internal("the system clock is set before 1970"))
}

/// Tokens for a service account, exchanged for signed assertions at its `token_uri`.
pub(super) struct ServiceAccountSource {
    key: ServiceAccountKey,
    scope: &'static str,
    agent: crate::firestore::transport::Agent,
}

impl ServiceAccountSource {
    fn new(key: ServiceAccountKey, scope: &'static str, http: &Http) -> ServiceAccountSource {
        // A proxy cannot reach a token endpoint on this machine (a test double, a local
        // emulator of Google's endpoint).
        let local = url::Url::parse(&key.token_uri).is_ok_and(|url| is_loopback(&url));
        ServiceAccountSource {
            agent: http.agent(local),
            key,
            scope,
        }
    }

    /// The key in `value`, credentials JSON whose `type` is `service_account`; its tokens are
    /// for `scope`.
    pub(super) fn from_value(
        value: &Value,
        scope: &'static str,
        http: &Http,
    ) -> Result<ServiceAccountSource> {
        Ok(ServiceAccountSource::new(
            ServiceAccountKey::from_value(value)?,
            scope,
            http,
        ))
    }

    /// The key in `json`, the text of a key file; its tokens are for `scope`.
    pub(super) fn from_json(
        json: &str,
        scope: &'static str,
        http: &Http,
    ) -> Result<ServiceAccountSource> {
        Ok(ServiceAccountSource::new(
            ServiceAccountKey::parse(json)?,
            scope,
            http,
        ))
    }

    /// The key in the file at `path`; its tokens are for `scope`.
    pub(super) fn from_file(
        path: &Path,
        scope: &'static str,
        http: &Http,
    ) -> Result<ServiceAccountSource> {
        let json = read_credentials_file(path, "the service-account key file")?;
        let key = ServiceAccountKey::parse(&json).map_err(|e| {
            LockError::invalid_argument(format!("{}: {}", path.display(), e.message()))
        })?;
        Ok(ServiceAccountSource::new(key, scope, http))
    }
}

impl FetchToken for ServiceAccountSource {
    fn fetch(&self) -> Result<FetchedToken> {
        let assertion = self.key.assertion(unix_now()?, self.scope)?;
        let what = format!("the OAuth token endpoint {}", self.key.token_uri);
        let answer = self
            .agent
            .post(&self.key.token_uri)
            .header("Accept", "application/json")
            .send_form([
                ("grant_type", JWT_BEARER_GRANT),
                ("assertion", assertion.as_str()),
            ]);
        // An endpoint may quote the assertion, or only its claims or signature.
        let mut secrets = vec![assertion.as_str()];
        secrets.extend(assertion.split('.'));
        read_token_answer(&what, answer, &secrets, "")
    }
}

impl fmt::Debug for ServiceAccountSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.key.client_email)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    const KEY_FILE: &str = include_str!("../../../tests/data/test-service-account.json");
    const PUBLIC_KEY: &str = include_str!("../../../tests/data/test-service-account.pub.pem");

    fn key_json() -> Value {
        serde_json::from_str(KEY_FILE).unwrap()
    }

    fn private_key() -> String {
        key_json()["private_key"].as_str().unwrap().to_owned()
    }

    /// A line from the middle of the PEM: whatever leaks the key leaks this.
    fn key_fragment() -> String {
        private_key().lines().nth(5).unwrap().to_owned()
    }

    fn parse_with(change: impl FnOnce(&mut Value)) -> Result<ServiceAccountKey> {
        let mut json = key_json();
        change(&mut json);
        ServiceAccountKey::parse(&json.to_string())
    }

    fn assert_invalid(result: Result<ServiceAccountKey>, expected: &str) {
        let err = result.err().expect("the key should be rejected");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(err.message().contains(expected), "{err}");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(&key_fragment()), "{shown}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }

    #[test]
    fn the_test_key_parses() {
        let mut json = key_json();
        json["token_uri"] = "https://oauth2.googleapis.com/token".into();
        let key = ServiceAccountKey::parse(&json.to_string()).unwrap();
        assert_eq!(
            key.client_email,
            "syncguard-test@syncguard-test.iam.gserviceaccount.com"
        );
        assert_eq!(key.private_key_id, json["private_key_id"].as_str().unwrap());
        assert_eq!(key.token_uri, "https://oauth2.googleapis.com/token");
    }

    #[test]
    fn bad_keys_are_invalid_arguments_that_do_not_quote_the_key() {
        assert_invalid(ServiceAccountKey::parse("{not json"), "not valid JSON");
        assert_invalid(ServiceAccountKey::parse("[1, 2]"), "not a JSON object");
        assert_invalid(
            parse_with(|j| j["type"] = "authorized_user".into()),
            "of type `authorized_user`, not a service-account key: pass them as \
             `Credentials::Json`",
        );
        assert_invalid(
            parse_with(|j| j["type"] = private_key().into()),
            "not a service-account key",
        );
        assert_invalid(
            parse_with(|j| {
                j.as_object_mut().unwrap().remove("type");
            }),
            "not a service-account key",
        );
        for field in ["client_email", "private_key_id", "token_uri", "private_key"] {
            assert_invalid(
                parse_with(|j| {
                    j.as_object_mut().unwrap().remove(field);
                }),
                &format!("no `{field}`"),
            );
            assert_invalid(
                parse_with(|j| j[field] = 42.into()),
                &format!("no `{field}`"),
            );
        }
        assert_invalid(
            parse_with(|j| j["private_key"] = "-----BEGIN PRIVATE KEY-----\nAAAA\n".into()),
            "not an RSA private key",
        );
        // A valid PEM frame around something that is not a key.
        let broken = private_key().replace(&key_fragment(), &"A".repeat(64));
        assert_invalid(
            parse_with(|j| j["private_key"] = broken.into()),
            "private_key",
        );
        assert_invalid(
            parse_with(|j| j["token_uri"] = "not a url".into()),
            "not a valid URL",
        );
        assert_invalid(
            parse_with(|j| j["token_uri"] = "http://oauth2.example.com/token".into()),
            "must be an https URL",
        );
    }

    #[test]
    fn private_key_in_a_type_error_is_not_quoted() {
        // serde would quote a string where a map was expected; the key must not be that string.
        let err = ServiceAccountKey::parse(&serde_json::to_string(&private_key()).unwrap())
            .err()
            .unwrap();
        assert!(!err.to_string().contains(&key_fragment()), "{err}");
    }

    #[test]
    fn token_uris_must_be_https_unless_local() {
        let check = |uri: &str| check_secret_endpoint("the `token_uri`", uri);
        for ok in [
            "https://oauth2.googleapis.com/token",
            "http://127.0.0.1:8080/token",
            "http://localhost/token",
            "http://[::1]:9/token",
        ] {
            assert!(check(ok).is_ok(), "{ok}");
        }
        crate::error::assert_refused_without_secret(
            &[
                "http://10.0.0.1/token",
                "https://user:hunter2@oauth2.googleapis.com/token",
                "ftp://example.com/",
                "file:///etc/passwd",
            ],
            check,
        );
    }

    /// The DER header of a 2048-bit RSA key's SubjectPublicKeyInfo (the rsaEncryption
    /// algorithm, then the bit string's tag, length and unused-bits byte): what follows is the
    /// PKCS#1 `RSAPublicKey` that ring verifies with.
    const RSA_2048_SPKI_HEADER: [u8; 24] = [
        0x30, 0x82, 0x01, 0x22, 0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01,
        0x01, 0x01, 0x05, 0x00, 0x03, 0x82, 0x01, 0x0f, 0x00,
    ];

    /// Whether `jwt` carries a valid RS256 signature by the key whose public half is in
    /// `tests/data/test-service-account.pub.pem`.
    fn signed_by_the_test_key(jwt: &str) -> bool {
        use rustls::pki_types::SubjectPublicKeyInfoDer;
        let spki = SubjectPublicKeyInfoDer::from_pem_slice(PUBLIC_KEY.as_bytes()).unwrap();
        let public = spki.strip_prefix(&RSA_2048_SPKI_HEADER[..]).unwrap();
        let (unsigned, signature) = jwt.rsplit_once('.').unwrap();
        let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else {
            return false;
        };
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            public,
        )
        .verify(unsigned.as_bytes(), &signature)
        .is_ok()
    }

    #[derive(serde::Deserialize)]
    struct Claims {
        iss: String,
        scope: String,
        aud: String,
        iat: u64,
        exp: u64,
    }

    #[test]
    fn the_assertion_is_signed_with_the_key_and_claims_its_scope() {
        let mut json = key_json();
        json["token_uri"] = "https://oauth2.googleapis.com/token".into();
        let key = ServiceAccountKey::parse(&json.to_string()).unwrap();
        let now = unix_now().unwrap();
        let assertion = key.assertion(now, super::super::SCOPE).unwrap();

        assert!(signed_by_the_test_key(&assertion), "{assertion}");
        // The check can fail: one changed character of the signature breaks it.
        let at = assertion.rfind('.').unwrap() + 100;
        let flipped = if &assertion[at..=at] == "A" { "B" } else { "A" };
        let tampered = format!("{}{flipped}{}", &assertion[..at], &assertion[at + 1..]);
        assert!(!signed_by_the_test_key(&tampered));

        // jsonwebtoken reads it back: the header and claims are a well-formed JWT.
        let decoded = jsonwebtoken::dangerous::insecure_decode::<Claims>(&assertion).unwrap();
        assert_eq!(decoded.header.alg, Algorithm::RS256);
        assert_eq!(decoded.header.typ.as_deref(), Some("JWT"));
        assert_eq!(
            decoded.header.kid.as_deref(),
            json["private_key_id"].as_str()
        );
        let claims = decoded.claims;
        assert_eq!(claims.iss, key.client_email);
        assert_eq!(claims.aud, "https://oauth2.googleapis.com/token");
        assert_eq!(claims.scope, super::super::SCOPE);
        assert_eq!(claims.iat, now);
        assert_eq!(claims.exp - claims.iat, 3600);
    }

    #[test]
    fn a_pkcs1_key_signs_like_its_pkcs8_form() {
        // The PKCS#8 wrapper of an RSA key (version, rsaEncryption, then the octet string's
        // tag and length) around the PKCS#1 `RSAPrivateKey`.
        let pkcs8 = PrivateKeyDer::from_pem_slice(private_key().as_bytes()).unwrap();
        let pkcs8 = pkcs8.secret_der();
        assert_eq!(
            &pkcs8[4..22],
            b"\x02\x01\x00\x30\x0d\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x01\x01\x05\x00"
        );
        assert_eq!(pkcs8[22..24], [0x04, 0x82]);
        let pkcs1 = &pkcs8[26..];
        let body = base64::engine::general_purpose::STANDARD.encode(pkcs1);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|line| std::str::from_utf8(line).unwrap())
            .collect();
        let pem = format!(
            "-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----\n",
            lines.join("\n")
        );
        let key = parse_with(|j| j["private_key"] = pem.into()).unwrap();
        let assertion = key.assertion(unix_now().unwrap(), "scope").unwrap();
        assert!(signed_by_the_test_key(&assertion), "{assertion}");
    }
}
