//! The kinds of credentials beyond a service-account key — `authorized_user`,
//! `external_account`, `impersonated_service_account` — against one local stub that plays
//! Google's token endpoint, STS, IAM, a subject-token URL and Firestore at once: the exact
//! requests, the token reaching Firestore, caching, refresh, error mapping, and secrets kept
//! out of messages and `Debug`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use serde_json::{Value, json};
use syncguard::firestore::{Credentials, FirestoreBackend, TokenProvider};
use syncguard::{ErrorCode, LockBackend as _};

use super::{KEY_FILE, PUBLIC_KEY, SCOPE, TIMEOUT, token_answer};
use crate::support::http::{StubRequest, StubResponse, StubServer};
use crate::support::jwt;
use crate::support::{self, free_port};

const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";
const CLIENT_ID: &str = "test-client.apps.googleusercontent.com";
const CLIENT_SECRET: &str = "client-secret-d0n7-l34k";
const REFRESH_TOKEN: &str = "1//refresh-token-d0n7-l34k";
const SUBJECT_TOKEN: &str =
    "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ3b3JrbG9hZC1kMG43LWwzNGsifQ.c2lnbmF0dXJlLWQwbjctbDM0aw";
const STS_CLIENT_ID: &str = "sts-client";
const STS_CLIENT_SECRET: &str = "sts-secret-d0n7-l34k";
const HEADER_SECRET: &str = "Bearer header-d0n7-l34k";
const TARGET: &str = "target@syncguard-test.iam.gserviceaccount.com";
const WORKLOAD_AUDIENCE: &str = "//iam.googleapis.com/projects/123/locations/global/\
                                 workloadIdentityPools/pool/providers/provider";
const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The path of IAM's generateAccessToken for [`TARGET`] on the stub.
const IAM_PATH: &str = "/v1/projects/-/serviceAccounts/target@syncguard-test.iam.gserviceaccount.com:generateAccessToken";
/// An expiry far enough ahead that the cache keeps the token for the whole test.
const FAR_FUTURE: &str = "2099-01-01T00:00:00Z";

/// Every secret the credentials below carry or the stub hands out: none may show in a message
/// or in `Debug`.
fn secrets() -> Vec<String> {
    let basic = base64::engine::general_purpose::STANDARD
        .encode(format!("{STS_CLIENT_ID}:{STS_CLIENT_SECRET}"));
    let mut secrets: Vec<String> = [
        CLIENT_SECRET,
        REFRESH_TOKEN,
        SUBJECT_TOKEN,
        STS_CLIENT_SECRET,
        HEADER_SECRET,
        "d0n7-l34k",
        "ya29.",
    ]
    .map(str::to_owned)
    .to_vec();
    secrets.push(basic);
    secrets.extend(SUBJECT_TOKEN.split('.').map(str::to_owned));
    secrets
}

#[track_caller]
fn assert_no_secret(text: &str) {
    for secret in secrets() {
        assert!(!text.contains(&secret), "{secret:?} leaked: {text}");
    }
}

// --- the stub -----------------------------------------------------------------------------------

/// What the stub answers a token request with, by path: `/token` (OAuth) hands out
/// `ya29.user-N`, `/sts` `ya29.federated-N`, IAM `ya29.impersonated-N` valid until `expiry`,
/// `/subject` the subject token as JSON; `fail` (a path prefix and a status) makes one of them
/// refuse, quoting back everything secret it was sent.
struct Google {
    fail: Option<(&'static str, u16)>,
    expiry: &'static str,
    issued: AtomicU64,
}

impl Google {
    fn answer(&self, request: &StubRequest) -> StubResponse {
        if request.path.ends_with(":batchGet") {
            return StubResponse::json(
                200,
                json!([{ "missing": "projects/p/databases/(default)/documents/locks/k" }]),
            );
        }
        match self.fail {
            Some((path, status)) if request.path.starts_with(path) => {
                return StubResponse::json(
                    status,
                    json!({ "error": "invalid_grant", "error_description": echo(request) }),
                );
            }
            _ => {}
        }
        let n = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        match request.path.as_str() {
            "/token" => token_answer(&format!("ya29.user-{n}"), 3600),
            "/sts" => token_answer(&format!("ya29.federated-{n}"), 3600),
            IAM_PATH => StubResponse::json(
                200,
                json!({ "accessToken": format!("ya29.impersonated-{n}"), "expireTime": self.expiry }),
            ),
            path if path.starts_with("/subject") => {
                StubResponse::json(200, json!({ "id_token": SUBJECT_TOKEN, "other": "x" }))
            }
            _ => StubResponse::json(404, json!({ "error": "not_found" })),
        }
    }
}

/// Everything a request carried that could be secret, as an endpoint that quotes it would:
/// its secret headers, its form's values, its raw body. (Messages keep the first 300
/// characters of a quote, so the shorter and more telling parts come first.)
fn echo(request: &StubRequest) -> String {
    let mut parts: Vec<String> = ["authorization", "x-secret"]
        .iter()
        .filter_map(|name| request.header(name).map(str::to_owned))
        .collect();
    parts.extend(
        request
            .form()
            .into_iter()
            .map(|(_, value)| value)
            .filter(|value| !value.starts_with("urn:") && !value.starts_with("//")),
    );
    parts.push(String::from_utf8_lossy(&request.body).into_owned());
    parts.join(" ")
}

fn google(fail: Option<(&'static str, u16)>, expiry: &'static str) -> StubServer {
    let google = Google {
        fail,
        expiry,
        issued: AtomicU64::new(0),
    };
    StubServer::start(move |request| google.answer(request))
}

/// The requests the stub got at paths starting with `prefix`.
fn requests_to(stub: &StubServer, prefix: &str) -> Vec<StubRequest> {
    stub.requests()
        .into_iter()
        .filter(|request| request.path.starts_with(prefix))
        .collect()
}

/// A backend whose Firestore is the stub, authenticating with `credentials`.
fn backend_on(stub: &StubServer, credentials: Credentials) -> FirestoreBackend {
    FirestoreBackend::builder()
        .project("p")
        .emulator_host(stub.host())
        .credentials(credentials)
        .timeout(TIMEOUT)
        .build()
        .unwrap()
}

/// Two reads through a backend on the stub; the `Authorization` of each Firestore request.
fn firestore_authorizations(stub: &StubServer, credentials: Credentials) -> Vec<String> {
    let backend = backend_on(stub, credentials);
    for _ in 0..2 {
        assert!(!backend.is_locked("k").unwrap());
    }
    stub.requests()
        .into_iter()
        .filter(|request| request.path.ends_with(":batchGet"))
        .map(|request| request.header("authorization").unwrap_or("").to_owned())
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

// --- credentials --------------------------------------------------------------------------------

fn user(stub: &StubServer) -> Value {
    json!({
        "type": "authorized_user",
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "refresh_token": REFRESH_TOKEN,
        "token_uri": format!("{}/token", stub.url()),
        "quota_project_id": "billing-project",
    })
}

fn subject_file(text: &str) -> PathBuf {
    let path = support::scratch_dir("firestore-auth-subject").join("token");
    std::fs::write(&path, text).unwrap();
    path
}

/// Workload Identity Federation with a subject token in `file`, as text.
fn federated_from_file(stub: &StubServer, file: &Path) -> Value {
    json!({
        "type": "external_account",
        "audience": WORKLOAD_AUDIENCE,
        "subject_token_type": JWT_TOKEN_TYPE,
        "token_url": format!("{}/sts", stub.url()),
        "credential_source": { "file": file },
    })
}

/// Workload Identity Federation with a subject token from a URL (JSON, with headers), client
/// authentication, and impersonation of [`TARGET`] for 30 minutes.
fn federated_from_url(stub: &StubServer) -> Value {
    json!({
        "type": "external_account",
        "audience": WORKLOAD_AUDIENCE,
        "subject_token_type": JWT_TOKEN_TYPE,
        "token_url": format!("{}/sts", stub.url()),
        "client_id": STS_CLIENT_ID,
        "client_secret": STS_CLIENT_SECRET,
        "service_account_impersonation_url": format!("{}{IAM_PATH}", stub.url()),
        "service_account_impersonation": { "token_lifetime_seconds": 1800 },
        "credential_source": {
            "url": format!("{}/subject?api-version=1", stub.url()),
            "headers": { "Metadata": "True", "X-Secret": HEADER_SECRET },
            "format": { "type": "json", "subject_token_field_name": "id_token" },
        },
    })
}

/// [`TARGET`] impersonated by `source`, through two delegates.
fn impersonated(stub: &StubServer, source: Value) -> Value {
    json!({
        "type": "impersonated_service_account",
        "service_account_impersonation_url": format!("{}{IAM_PATH}", stub.url()),
        "delegates": [
            "delegate@syncguard-test.iam.gserviceaccount.com",
            "projects/-/serviceAccounts/other@syncguard-test.iam.gserviceaccount.com",
        ],
        "source_credentials": source,
    })
}

fn json_credentials(value: &Value) -> Credentials {
    Credentials::Json(value.to_string())
}

// --- the happy paths ----------------------------------------------------------------------------

#[test]
fn an_authorized_user_refreshes_its_token_once_for_firestore() {
    let stub = google(None, FAR_FUTURE);
    let credentials = json_credentials(&user(&stub));
    let provider = TokenProvider::new(&credentials, TIMEOUT).unwrap();
    assert_eq!(provider.quota_project_id(), Some("billing-project"));
    assert!(stub.requests().is_empty(), "made without a network call");

    let authorizations = firestore_authorizations(&stub, credentials);
    assert_eq!(authorizations, ["Bearer ya29.user-1"; 2]);
    // User credentials bill their quota project: every Firestore request names it.
    let quota_projects: Vec<Option<String>> = stub
        .requests()
        .into_iter()
        .filter(|request| request.path.ends_with(":batchGet"))
        .map(|request| request.header("x-goog-user-project").map(str::to_owned))
        .collect();
    assert_eq!(quota_projects, vec![Some("billing-project".to_owned()); 2]);
    let requests = requests_to(&stub, "/token");
    assert_eq!(requests.len(), 1, "the second read used the cached token");
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(
        request.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(request.header("authorization"), None);
    // No scope: a refresh token keeps the scopes the user consented to.
    assert_eq!(
        request.form(),
        pairs(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", REFRESH_TOKEN),
            ("client_id", CLIENT_ID),
            ("client_secret", CLIENT_SECRET),
        ])
    );
}

#[test]
fn an_external_account_exchanges_a_file_sourced_subject_token_at_sts() {
    let stub = google(None, FAR_FUTURE);
    let file = subject_file(&format!("{SUBJECT_TOKEN}\n"));
    let credentials = json_credentials(&federated_from_file(&stub, &file));

    let authorizations = firestore_authorizations(&stub, credentials);
    assert_eq!(authorizations, ["Bearer ya29.federated-1"; 2]);
    assert!(
        stub.requests()
            .iter()
            .all(|request| request.header("x-goog-user-project").is_none()),
        "no quota project in the file, none sent"
    );
    let requests = requests_to(&stub, "/sts");
    assert_eq!(requests.len(), 1, "the second read used the cached token");
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(
        request.header("authorization"),
        None,
        "no client: no basic auth"
    );
    assert_eq!(
        request.form(),
        pairs(&[
            ("grant_type", TOKEN_EXCHANGE),
            ("audience", WORKLOAD_AUDIENCE),
            ("scope", SCOPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("subject_token", SUBJECT_TOKEN),
            ("subject_token_type", JWT_TOKEN_TYPE),
        ])
    );
}

#[test]
fn an_external_account_with_a_url_source_and_impersonation() {
    let stub = google(None, FAR_FUTURE);
    let credentials = json_credentials(&federated_from_url(&stub));

    let authorizations = firestore_authorizations(&stub, credentials);
    assert_eq!(authorizations, ["Bearer ya29.impersonated-3"; 2]);
    let paths: Vec<String> = stub
        .requests()
        .into_iter()
        .filter(|request| !request.path.ends_with(":batchGet"))
        .map(|request| request.path)
        .collect();
    assert_eq!(
        paths,
        ["/subject?api-version=1", "/sts", IAM_PATH],
        "once each"
    );

    let subject = &requests_to(&stub, "/subject")[0];
    assert_eq!(subject.method, "GET");
    assert_eq!(subject.header("metadata"), Some("True"));
    assert_eq!(subject.header("x-secret"), Some(HEADER_SECRET));

    let sts = &requests_to(&stub, "/sts")[0];
    let basic = base64::engine::general_purpose::STANDARD
        .encode(format!("{STS_CLIENT_ID}:{STS_CLIENT_SECRET}"));
    assert_eq!(
        sts.header("authorization"),
        Some(format!("Basic {basic}").as_str())
    );
    // The federated token only calls IAM: it asks for cloud-platform.
    assert_eq!(
        sts.form(),
        pairs(&[
            ("grant_type", TOKEN_EXCHANGE),
            ("audience", WORKLOAD_AUDIENCE),
            ("scope", CLOUD_PLATFORM),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("subject_token", SUBJECT_TOKEN),
            ("subject_token_type", JWT_TOKEN_TYPE),
        ])
    );

    let iam = &requests_to(&stub, IAM_PATH)[0];
    assert_eq!(iam.method, "POST");
    assert_eq!(iam.header("authorization"), Some("Bearer ya29.federated-2"));
    assert_eq!(
        iam.body_json(),
        json!({ "scope": [SCOPE], "lifetime": "1800s" })
    );
}

#[test]
fn a_workforce_pool_user_project_goes_to_sts_as_options() {
    let stub = google(None, FAR_FUTURE);
    let file = subject_file(SUBJECT_TOKEN);
    let mut config = federated_from_file(&stub, &file);
    config["audience"] =
        "//iam.googleapis.com/locations/global/workforcePools/pool/providers/p".into();
    config["workforce_pool_user_project"] = "user-project".into();
    let provider = TokenProvider::new(&json_credentials(&config), TIMEOUT).unwrap();
    assert_eq!(provider.authorization().unwrap(), "Bearer ya29.federated-1");
    let form = requests_to(&stub, "/sts")[0].form();
    assert_eq!(
        form.last(),
        Some(&(
            "options".to_owned(),
            r#"{"userProject":"user-project"}"#.to_owned()
        ))
    );
}

#[test]
fn an_impersonated_service_account_with_a_user_source_and_delegates() {
    let stub = google(None, FAR_FUTURE);
    let credentials = json_credentials(&impersonated(&stub, user(&stub)));

    let authorizations = firestore_authorizations(&stub, credentials);
    assert_eq!(authorizations, ["Bearer ya29.impersonated-2"; 2]);
    let source = requests_to(&stub, "/token");
    assert_eq!(source.len(), 1, "the second read used the cached token");
    assert_eq!(
        source[0].form()[0],
        pairs(&[("grant_type", "refresh_token")])[0]
    );
    let iam = requests_to(&stub, IAM_PATH);
    assert_eq!(iam.len(), 1);
    assert_eq!(iam[0].header("authorization"), Some("Bearer ya29.user-1"));
    assert_eq!(
        iam[0].body_json(),
        json!({
            "delegates": [
                "projects/-/serviceAccounts/delegate@syncguard-test.iam.gserviceaccount.com",
                "projects/-/serviceAccounts/other@syncguard-test.iam.gserviceaccount.com",
            ],
            "scope": [SCOPE],
            "lifetime": "3600s",
        })
    );
}

#[test]
fn an_impersonating_service_account_key_asks_for_cloud_platform() {
    #[derive(serde::Deserialize)]
    struct Claims {
        scope: String,
        aud: String,
    }
    let stub = google(None, FAR_FUTURE);
    let mut key: Value = serde_json::from_str(KEY_FILE).unwrap();
    key["token_uri"] = format!("{}/token", stub.url()).into();
    let provider =
        TokenProvider::new(&json_credentials(&impersonated(&stub, key)), TIMEOUT).unwrap();
    assert_eq!(
        provider.authorization().unwrap(),
        "Bearer ya29.impersonated-2"
    );

    let form = requests_to(&stub, "/token")[0].form();
    let assertion = &form.iter().find(|(name, _)| name == "assertion").unwrap().1;
    let claims = jwt::verify_rs256::<Claims>(assertion, PUBLIC_KEY)
        .unwrap()
        .claims;
    assert_eq!(claims.aud, format!("{}/token", stub.url()));
    assert_eq!(claims.scope, CLOUD_PLATFORM);
    assert_eq!(
        requests_to(&stub, IAM_PATH)[0].header("authorization"),
        Some("Bearer ya29.user-1")
    );
}

#[test]
fn an_impersonated_token_is_fetched_again_once_it_expires() {
    // IAM says the token has already expired: each use must fetch a new one.
    let stub = google(None, "2000-01-01T00:00:00Z");
    let provider = TokenProvider::new(
        &json_credentials(&impersonated(&stub, user(&stub))),
        TIMEOUT,
    )
    .unwrap();
    assert_eq!(
        provider.authorization().unwrap(),
        "Bearer ya29.impersonated-2"
    );
    assert_eq!(
        provider.authorization().unwrap(),
        "Bearer ya29.impersonated-4"
    );
    assert_eq!(requests_to(&stub, IAM_PATH).len(), 2);
}

#[test]
fn the_subject_token_file_is_read_again_for_each_exchange() {
    // Expiring at once, so the second call exchanges again, with the rotated file.
    let file = subject_file("first.subject.token");
    let issued = AtomicU64::new(0);
    let stub = StubServer::start(move |_| {
        let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
        token_answer(&format!("ya29.federated-{n}"), 0)
    });
    let provider = TokenProvider::new(
        &json_credentials(&federated_from_file(&stub, &file)),
        TIMEOUT,
    )
    .unwrap();
    provider.authorization().unwrap();
    std::fs::write(&file, "second.subject.token").unwrap();
    assert_eq!(provider.authorization().unwrap(), "Bearer ya29.federated-2");
    let subjects: Vec<String> = stub
        .requests()
        .iter()
        .map(|request| {
            let form = request.form();
            form.into_iter()
                .find(|(name, _)| name == "subject_token")
                .unwrap()
                .1
        })
        .collect();
    assert_eq!(subjects, ["first.subject.token", "second.subject.token"]);
}

// --- failures -----------------------------------------------------------------------------------

/// Credentials whose requests all go to the stub, subject token in the file.
type Config = fn(&StubServer, &Path) -> Value;

/// Each step that can refuse: its name, the path of its request on the stub, and credentials
/// that take it.
const STEPS: [(&str, &str, Config); 7] = [
    ("authorized_user token endpoint", "/token", |stub, _| {
        user(stub)
    }),
    ("external_account STS", "/sts", federated_from_file),
    ("external_account STS with a client", "/sts", |stub, _| {
        federated_from_url(stub)
    }),
    ("external_account subject URL", "/subject", |stub, _| {
        federated_from_url(stub)
    }),
    ("external_account IAM", IAM_PATH, |stub, file| {
        let mut config = federated_from_file(stub, file);
        config["service_account_impersonation_url"] = format!("{}{IAM_PATH}", stub.url()).into();
        config
    }),
    ("impersonated source", "/token", |stub, _| {
        impersonated(stub, user(stub))
    }),
    ("impersonated IAM", IAM_PATH, |stub, _| {
        impersonated(stub, user(stub))
    }),
];

#[test]
fn refusals_map_to_codes_and_quote_no_secret() {
    let file = subject_file(SUBJECT_TOKEN);
    for (status, code) in [
        (503, ErrorCode::ServiceUnavailable),
        (500, ErrorCode::ServiceUnavailable),
        (429, ErrorCode::RateLimited),
        (400, ErrorCode::AuthFailed),
        (401, ErrorCode::AuthFailed),
        (403, ErrorCode::AuthFailed),
    ] {
        for (step, path, config) in STEPS {
            let stub = google(Some((path, status)), FAR_FUTURE);
            let provider =
                TokenProvider::new(&json_credentials(&config(&stub, &file)), TIMEOUT).unwrap();
            let err = provider.authorization().unwrap_err();
            assert_eq!(err.code(), code, "{step}, HTTP {status}: {err}");
            assert!(
                err.message().contains(&format!("HTTP {status}")),
                "{step}: {err}"
            );
            assert!(err.message().contains("invalid_grant"), "{step}: {err}");
            assert_no_secret(&format!("{err} {err:?} {provider:?}"));
            assert_eq!(
                requests_to(&stub, path).len(),
                1,
                "{step}: the failing request was made once"
            );
        }
    }
}

#[test]
fn unreachable_endpoints_are_service_unavailable() {
    let stub = google(None, FAR_FUTURE);
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let file = subject_file(SUBJECT_TOKEN);
    let mut unreachable_iam = impersonated(&stub, user(&stub));
    unreachable_iam["service_account_impersonation_url"] =
        format!("{nobody}/v1/sa@p:generateAccessToken").into();
    let mut unreachable_sts = federated_from_file(&stub, &file);
    unreachable_sts["token_url"] = format!("{nobody}/sts").into();
    let mut unreachable_subject = federated_from_url(&stub);
    unreachable_subject["credential_source"]["url"] = format!("{nobody}/subject").into();
    for config in [unreachable_iam, unreachable_sts, unreachable_subject] {
        let provider = TokenProvider::new(&json_credentials(&config), TIMEOUT).unwrap();
        let err = provider.authorization().unwrap_err();
        assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
        assert!(err.message().contains(&nobody), "{err}");
        assert_no_secret(&format!("{err} {err:?}"));
    }
}

#[test]
fn a_missing_or_empty_subject_token_is_auth_failed_naming_the_file() {
    let stub = google(None, FAR_FUTURE);
    let dir = support::scratch_dir("firestore-auth-subject-missing");
    let missing = dir.join("missing-token");
    let empty = dir.join("empty-token");
    std::fs::write(&empty, "\n").unwrap();
    for (file, expected) in [
        (&missing, "could not read"),
        (&empty, "holds no subject token"),
    ] {
        let config = federated_from_file(&stub, file);
        let provider = TokenProvider::new(&json_credentials(&config), TIMEOUT).unwrap();
        let err = provider.authorization().unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
        assert!(err.message().contains(expected), "{err}");
        assert!(err.message().contains(&file.display().to_string()), "{err}");
    }
    assert!(requests_to(&stub, "/sts").is_empty(), "nothing to exchange");
}

#[test]
fn unusable_credentials_files_are_named_by_path_never_quoted() {
    let dir = support::scratch_dir("firestore-auth-files");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let user_text = json!({
        "type": "authorized_user", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
        "refresh_token": REFRESH_TOKEN,
    })
    .to_string();
    let cases = [
        (dir.join("missing.json"), "could not read the credentials file"),
        (
            write("truncated.json", &user_text[..user_text.len() - 5]),
            "is not valid JSON (line 1, column",
        ),
        (
            write("array.json", &format!("[{user_text}]")),
            "is not a JSON object",
        ),
        (
            write(
                "gdch.json",
                &user_text.replace("authorized_user", "gdch_service_account"),
            ),
            "credentials of type `gdch_service_account` are not supported",
        ),
        (
            write(
                "aws.json",
                &json!({
                    "type": "external_account", "audience": WORKLOAD_AUDIENCE,
                    "subject_token_type": "urn:ietf:params:aws:token-type:aws4_request",
                    "credential_source": { "environment_id": "aws1", "regional_cred_verification_url": REFRESH_TOKEN },
                })
                .to_string(),
            ),
            "`credential_source.environment_id` is set: AWS credential sources are not supported",
        ),
        (
            write(
                "executable.json",
                &json!({
                    "type": "external_account", "audience": WORKLOAD_AUDIENCE,
                    "subject_token_type": JWT_TOKEN_TYPE,
                    "credential_source": { "executable": { "command": REFRESH_TOKEN } },
                })
                .to_string(),
            ),
            "executable-sourced credentials are not supported",
        ),
        (
            write(
                "no-refresh-token.json",
                &user_text.replace("refresh_token", "refresh_tokn"),
            ),
            "the `authorized_user` credentials' `refresh_token` is missing",
        ),
    ];
    for (path, expected) in cases {
        for credentials in [
            Credentials::File(path.clone()),
            Credentials::ServiceAccountFile(path.clone()),
        ] {
            let err = TokenProvider::new(&credentials, TIMEOUT).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(
                err.message().contains(&path.display().to_string()),
                "{credentials:?}: {err}"
            );
            if matches!(credentials, Credentials::File(_)) {
                assert!(err.message().contains(expected), "{expected}: {err}");
            }
            assert_no_secret(&format!("{err} {err:?} {credentials:?}"));
        }
    }
    // The same through the URL parameter, which takes any type.
    let user_file = write("user.json", &user_text);
    let url = format!("firestore://p?credentials={}", user_file.display());
    let backend = FirestoreBackend::connect(&url).unwrap();
    assert_no_secret(&format!("{backend:?}"));
}

#[test]
fn debug_shows_kinds_and_identifiers_only() {
    let stub = google(None, FAR_FUTURE);
    let file = subject_file(SUBJECT_TOKEN);
    let configs = [
        user(&stub),
        federated_from_file(&stub, &file),
        federated_from_url(&stub),
        impersonated(&stub, user(&stub)),
    ];
    let mut shown = String::new();
    for config in &configs {
        let credentials = json_credentials(config);
        let provider = TokenProvider::new(&credentials, TIMEOUT).unwrap();
        provider.authorization().unwrap();
        shown.push_str(&format!("{credentials:?}\n{provider:?}\n"));
    }
    assert_no_secret(&shown);
    for identifier in [CLIENT_ID, WORKLOAD_AUDIENCE, TARGET] {
        assert!(
            shown.contains(identifier),
            "{identifier} missing from {shown}"
        );
    }
}
