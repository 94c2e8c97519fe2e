//! Secrets stay out of logs at every level, TRACE included: a program that logs everything
//! (`log` at TRACE, every crate) while the Firestore backend exchanges credentials for tokens
//! and sends authorized requests finds none of the secrets in any record — not the JWT
//! assertion, the refresh token, the client secret, the access tokens, nor the
//! `Authorization` header. Real exchanges against local token endpoints, and real requests to
//! the emulator with the token they hand out.

use serde_json::json;
use syncguard::LockBackend as _;
use syncguard::SystemClock;
use syncguard::firestore::{Credentials, FirestoreBackend, TokenProvider};
use syncguard::{Clock as _, driver::generate_lock_id};

use crate::support::capture_log::{Captured, capture};
use crate::support::http::{StubRequest, StubResponse, StubServer};
use crate::support::{PATIENT, jwt, shared_firestore, unique};

const KEY_FILE: &str = include_str!("../data/test-service-account.json");

/// The shortest run of a secret's characters that counts as showing it. Shorter than a row of
/// a hex dump (16 bytes), so that a secret spread over several records is still seen.
const WINDOW: usize = 12;

/// A secret no other text contains: letters and digits only, so that it reads the same in a
/// form, in JSON, in a header and in a hex dump's text column.
fn secret(name: &str) -> String {
    format!("{name}{}", generate_lock_id().replace(['-', '_'], "x"))
}

/// A JWT the emulator accepts as a bearer token, unique to this test: signed with the test key,
/// with a random `jti`.
fn emulator_access_token() -> String {
    let key: serde_json::Value = serde_json::from_str(KEY_FILE).unwrap();
    let now = SystemClock.now_ms() / 1000;
    let claims = json!({
        "iss": key["client_email"], "sub": key["client_email"],
        "aud": "https://firestore.googleapis.com/", "iat": now, "exp": now + 3600,
        "jti": secret("jti"),
    });
    jwt::sign_rs256(&claims, key["private_key"].as_str().unwrap())
}

fn token_answer(token: &str) -> StubResponse {
    StubResponse::json(
        200,
        json!({ "access_token": token, "expires_in": 3600, "token_type": "Bearer" }),
    )
}

fn form_value(request: &StubRequest, name: &str) -> String {
    request
        .form()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value)
        .unwrap_or_else(|| panic!("no {name} in the token request"))
}

/// Fails when any record shows any run of [`WINDOW`] characters of any secret, in its message
/// or its target.
#[track_caller]
fn assert_no_secret_logged(records: &[Captured], secrets: &[(&str, &str)]) {
    assert!(
        records.iter().any(|r| r.target == "capture-check"),
        "the capture does not see this thread's TRACE records: it would not see a leak either"
    );
    for (what, secret) in secrets {
        assert!(secret.len() >= 2 * WINDOW, "{what} is long enough to find");
        for window in secret.as_bytes().windows(WINDOW) {
            let window = std::str::from_utf8(window).unwrap();
            if let Some(record) = records
                .iter()
                .find(|r| r.message.contains(window) || r.target.contains(window))
            {
                panic!(
                    "the {what} shows in a {} record of {}: {}",
                    record.level, record.target, record.message
                );
            }
        }
    }
}

/// A service account's assertion exchanged for an access token, and that token sent to the
/// emulator with every request of an acquire, is_locked and release.
#[test]
fn a_service_account_and_its_firestore_requests_log_no_secret() {
    let access_token = emulator_access_token();
    let answer = access_token.clone();
    let token_endpoint = StubServer::start(move |_| token_answer(&answer));
    let mut key: serde_json::Value = serde_json::from_str(KEY_FILE).unwrap();
    key["token_uri"] = format!("{}/token", token_endpoint.url()).into();
    let backend = FirestoreBackend::builder()
        .project(crate::support::FIRESTORE_PROJECT)
        .emulator_host(shared_firestore().host())
        .credentials(Credentials::ServiceAccountJson(key.to_string()))
        .timeout(PATIENT)
        .build()
        .unwrap();
    let key_name = unique("trace");
    let ((), records) = capture(|| {
        log::trace!(target: "capture-check", "capturing");
        let lease = crate::support::lease(backend.acquire(&key_name, crate::support::TTL));
        assert!(backend.is_locked(&key_name).unwrap());
        assert!(backend.release(&lease.lock_id).unwrap());
    });
    let requests = token_endpoint.requests();
    assert_eq!(requests.len(), 1, "one exchange");
    let assertion = form_value(&requests[0], "assertion");
    let private_key = key["private_key"].as_str().unwrap().to_owned();
    let key_lines: Vec<&str> = private_key.lines().skip(1).take(3).collect();
    let mut secrets = vec![
        ("assertion", assertion.as_str()),
        ("access token", access_token.as_str()),
    ];
    // Each part of the JWTs on its own too (header, claims, signature).
    secrets.extend(assertion.split('.').map(|part| ("assertion part", part)));
    secrets.extend(
        access_token
            .split('.')
            .skip(1)
            .map(|part| ("access token part", part)),
    );
    secrets.extend(key_lines.iter().map(|line| ("private key", *line)));
    assert_no_secret_logged(&records, &secrets);
}

/// A user's refresh token and client secret exchanged for an access token.
#[test]
fn an_authorized_user_exchange_logs_no_secret() {
    let (refresh_token, client_secret, access_token) =
        (secret("refresh"), secret("clientsecret"), secret("ya29x"));
    let answer = access_token.clone();
    let token_endpoint = StubServer::start(move |_| token_answer(&answer));
    let credentials = json!({
        "type": "authorized_user",
        "client_id": "test-client.apps.googleusercontent.com",
        "client_secret": client_secret,
        "refresh_token": refresh_token,
        "token_uri": format!("{}/token", token_endpoint.url()),
    });
    let provider =
        TokenProvider::new(&Credentials::Json(credentials.to_string()), PATIENT).unwrap();
    let (authorization, records) = capture(|| {
        log::trace!(target: "capture-check", "capturing");
        provider.authorization()
    });
    assert_eq!(authorization.unwrap(), format!("Bearer {access_token}"));
    let request = &token_endpoint.requests()[0];
    assert_eq!(form_value(request, "refresh_token"), refresh_token);
    assert_no_secret_logged(
        &records,
        &[
            ("refresh token", &refresh_token),
            ("client secret", &client_secret),
            ("access token", &access_token),
        ],
    );
}
