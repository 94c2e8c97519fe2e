//! Firestore authentication against local stand-ins for Google's OAuth token endpoint and the
//! metadata server: the signed assertion, the token cache, failures, and credentials taken
//! from the environment in Google's Application Default Credentials order. The other kinds of
//! credentials (users, Workload Identity Federation, impersonation) are in `kinds`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod kinds;

use crate::support::http::{StubRequest, StubResponse, StubServer};
use crate::support::jwt;
use crate::support::{self, child};
use jsonwebtoken::Algorithm;
use serde_json::{Value, json};
use syncguard::ErrorCode;
use syncguard::firestore::{Credentials, TokenProvider};

const KEY_FILE: &str = include_str!("../data/test-service-account.json");
const PUBLIC_KEY: &str = include_str!("../data/test-service-account.pub.pem");
const EMAIL: &str = "syncguard-test@syncguard-test.iam.gserviceaccount.com";
const SCOPE: &str = "https://www.googleapis.com/auth/datastore";
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
/// Generous: nothing here should come near it, and no test depends on how long anything takes.
const TIMEOUT: Duration = Duration::from_secs(10);

fn key_json(token_uri: &str) -> Value {
    let mut key: Value = serde_json::from_str(KEY_FILE).unwrap();
    key["token_uri"] = token_uri.into();
    key
}

fn credentials(token_uri: &str) -> Credentials {
    Credentials::ServiceAccountJson(key_json(token_uri).to_string())
}

/// A provider for the service account, exchanging its assertions at `server`.
fn provider_for(server: &StubServer) -> TokenProvider {
    TokenProvider::new(&credentials(&token_uri(server)), TIMEOUT).unwrap()
}

fn token_uri(server: &StubServer) -> String {
    format!("{}/token", server.url())
}

fn private_key_id() -> String {
    key_json("")["private_key_id"].as_str().unwrap().to_owned()
}

/// Lines from the middle of the test's private key: whatever shows the key shows these.
fn key_fragments() -> Vec<String> {
    let key = key_json("")["private_key"].as_str().unwrap().to_owned();
    key.lines().skip(1).take(3).map(str::to_owned).collect()
}

fn token_answer(token: &str, expires_in: u64) -> StubResponse {
    StubResponse::json(
        200,
        json!({ "access_token": token, "expires_in": expires_in, "token_type": "Bearer" }),
    )
}

/// A token endpoint that hands out `token-1`, `token-2`, …, the first valid `first_expires_in`
/// seconds and the others an hour; and a provider that gets its tokens there.
fn counting_provider(first_expires_in: u64) -> (StubServer, TokenProvider) {
    let issued = AtomicU64::new(0);
    let server = StubServer::start(move |_| {
        let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
        let expires_in = if n == 1 { first_expires_in } else { 3600 };
        token_answer(&format!("token-{n}"), expires_in)
    });
    let provider = provider_for(&server);
    (server, provider)
}

fn assertion_of(request: &StubRequest) -> String {
    let form = request.form();
    form.iter()
        .find(|(name, _)| name == "assertion")
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| panic!("no assertion in {form:?}"))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Fails when `text` shows the private key or any of `secrets`.
fn assert_no_secrets(text: &str, secrets: &[&str]) {
    for fragment in key_fragments() {
        assert!(!text.contains(&fragment), "the private key leaked: {text}");
    }
    assert!(
        !text.contains("PRIVATE KEY"),
        "the private key leaked: {text}"
    );
    for secret in secrets {
        assert!(!text.contains(secret), "{secret:?} leaked: {text}");
    }
}

#[test]
fn a_service_account_exchanges_a_signed_assertion_for_a_token() {
    #[derive(serde::Deserialize)]
    struct Claims {
        iss: String,
        aud: String,
        scope: String,
        iat: u64,
        exp: u64,
    }

    let server = StubServer::start(|_| token_answer("ya29.first-token", 3600));
    let uri = token_uri(&server);
    let provider = TokenProvider::new(&credentials(&uri), TIMEOUT).unwrap();
    assert!(server.requests().is_empty(), "made without a network call");

    let before = unix_now();
    assert_eq!(provider.authorization().unwrap(), "Bearer ya29.first-token");
    let after = unix_now();

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/token");
    assert_eq!(
        request.header("Content-Type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(request.header("authorization"), None);
    let form = request.form();
    assert_eq!(form.len(), 2, "{form:?}");
    assert_eq!(
        form[0],
        ("grant_type".to_owned(), JWT_BEARER_GRANT.to_owned())
    );
    assert_eq!(form[1].0, "assertion");

    // Verified with the public half only: the assertion was signed with the test key.
    let decoded = jwt::verify_rs256::<Claims>(&form[1].1, PUBLIC_KEY)
        .unwrap_or_else(|e| panic!("the assertion does not verify: {e}"));
    assert_eq!(decoded.header.alg, Algorithm::RS256);
    assert_eq!(decoded.header.typ.as_deref(), Some("JWT"));
    assert_eq!(decoded.header.kid, Some(private_key_id()));
    let claims = decoded.claims;
    assert_eq!(claims.iss, EMAIL);
    assert_eq!(claims.aud, uri);
    assert_eq!(claims.scope, SCOPE);
    assert!(
        (before..=after).contains(&claims.iat),
        "iat {} not in {before}..={after}",
        claims.iat
    );
    assert_eq!(claims.exp - claims.iat, 3600);

    // The check above can fail: one changed character of the signature breaks it.
    let assertion = &form[1].1;
    let at = assertion.rfind('.').unwrap() + 100;
    let flipped = if &assertion[at..=at] == "A" { "B" } else { "A" };
    let tampered = format!("{}{flipped}{}", &assertion[..at], &assertion[at + 1..]);
    assert!(jwt::verify_rs256::<Claims>(&tampered, PUBLIC_KEY).is_err());
}

#[test]
fn a_key_file_works_like_its_json() {
    let server = StubServer::start(|_| token_answer("from-file", 3600));
    let path = support::scratch_dir("firestore-auth-key").join("key.json");
    std::fs::write(&path, key_json(&token_uri(&server)).to_string()).unwrap();
    let provider = TokenProvider::new(&Credentials::ServiceAccountFile(path), TIMEOUT).unwrap();
    assert_eq!(provider.authorization().unwrap(), "Bearer from-file");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn tokens_are_cached() {
    let (server, provider) = counting_provider(3600);
    let answers = [(); 2].map(|()| provider.authorization().unwrap());
    assert_eq!(answers, ["Bearer token-1"; 2]);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_token_due_for_refresh_is_fetched_again() {
    // Expiring now: already inside its refresh margin, so the next call must fetch.
    let (server, provider) = counting_provider(0);
    let answers = [(); 3].map(|()| provider.authorization().unwrap());
    // token-2 is good for an hour.
    assert_eq!(
        answers,
        ["Bearer token-1", "Bearer token-2", "Bearer token-2"]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // Each exchange signs its own assertion.
    for request in &requests {
        assert!(!assertion_of(request).is_empty());
    }
}

#[test]
fn concurrent_callers_share_one_refresh() {
    const CALLERS: usize = 8;
    // The endpoint holds its answer until the test has seen the request arrive and let it go,
    // so the callers pile up behind the one refresh in flight.
    let (arrived_tx, arrived) = mpsc::channel::<()>();
    let (release_tx, release) = mpsc::channel::<()>();
    let arrived_tx = Mutex::new(arrived_tx);
    let release = Mutex::new(release);
    let issued = AtomicU64::new(0);
    let server = StubServer::start(move |_| {
        let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = arrived_tx.lock().unwrap().send(());
        // Err means the test is over (the sender dropped): answer at once.
        let _ = release.lock().unwrap().recv();
        token_answer(&format!("token-{n}"), 3600)
    });
    // Declared after the server so that it is dropped first: a failing test then releases the
    // handler instead of waiting for it forever in the server's drop.
    let release_tx = release_tx;
    let provider = Arc::new(provider_for(&server));
    let start = Arc::new(Barrier::new(CALLERS + 1));

    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let provider = Arc::clone(&provider);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                provider.authorization()
            })
        })
        .collect();
    start.wait();
    arrived.recv().unwrap();
    release_tx.send(()).unwrap();

    for caller in callers {
        assert_eq!(caller.join().unwrap().unwrap(), "Bearer token-1");
    }
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_refused_exchange_is_auth_failed_and_shows_no_secret() {
    // The endpoint quotes the assertion back, whole or in part, as some servers do.
    for quote in ["assertion", "signature"] {
        let server = StubServer::start(move |request| {
            let assertion = assertion_of(request);
            let quoted = match quote {
                "assertion" => assertion.as_str(),
                _ => assertion.rsplit('.').next().unwrap(),
            };
            StubResponse::json(
                400,
                json!({
                    "error": "invalid_grant",
                    "error_description": format!("Invalid JWT Signature. ({quoted})"),
                }),
            )
        });
        let provider = provider_for(&server);
        let err = provider.authorization().unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
        assert!(err.message().contains("HTTP 400"), "{err}");
        assert!(err.message().contains("invalid_grant"), "{err}");
        assert!(err.message().contains("Invalid JWT Signature."), "{err}");
        // Messages are cut short, so look for the start of the claims and of the signature.
        let assertion = assertion_of(&server.requests()[0]);
        let parts: Vec<&str> = assertion
            .split('.')
            .skip(1)
            .map(|part| &part[..24])
            .collect();
        assert_no_secrets(&format!("{err} {err:?} {provider:?}"), &parts);

        // No token to fall back on: the next call asks again, and fails again.
        assert_eq!(
            provider.authorization().unwrap_err().code(),
            ErrorCode::AuthFailed
        );
        assert_eq!(server.requests().len(), 2);
    }
}

#[test]
fn answers_without_a_usable_token_are_auth_failed_and_not_quoted() {
    let answers = [
        StubResponse::json(
            200,
            json!({ "access_token": "ya29.leaked", "token_type": "Bearer" }),
        ),
        StubResponse::json(
            200,
            json!({ "access_token": "ya29.leaked", "expires_in": "soon" }),
        ),
        StubResponse::json(
            200,
            json!({ "access_token": "ya29.leaked", "expires_in": 3600, "token_type": "MAC" }),
        ),
        StubResponse::json(200, json!({ "token": "ya29.leaked", "expires_in": 3600 })),
        StubResponse::json(
            200,
            json!({ "access_token": "ya29 leaked\r\n", "expires_in": 3600 }),
        ),
        StubResponse {
            status: 200,
            headers: vec![],
            body: b"access_token=ya29.leaked".to_vec(),
        },
    ];
    for answer in answers {
        let shown = String::from_utf8_lossy(&answer.body).into_owned();
        let server = StubServer::start(move |_| answer.clone());
        let provider = provider_for(&server);
        let err = provider.authorization().unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthFailed, "{shown}: {err}");
        assert_no_secrets(&format!("{err} {err:?}"), &["ya29.leaked", "leaked"]);
    }
}

#[test]
fn server_trouble_at_the_token_endpoint_is_transient() {
    for (status, code) in [
        (503, ErrorCode::ServiceUnavailable),
        (500, ErrorCode::ServiceUnavailable),
        (429, ErrorCode::RateLimited),
        (401, ErrorCode::AuthFailed),
        (403, ErrorCode::AuthFailed),
    ] {
        let server = StubServer::start(move |_| {
            StubResponse::json(
                status,
                json!({ "error": "something", "error_description": "x" }),
            )
        });
        let provider = provider_for(&server);
        let err = provider.authorization().unwrap_err();
        assert_eq!(err.code(), code, "HTTP {status}: {err}");
        assert!(err.message().contains(&format!("HTTP {status}")), "{err}");
    }
}

#[test]
fn an_unreachable_token_endpoint_is_service_unavailable() {
    let uri = format!("http://127.0.0.1:{}/token", support::free_port());
    let provider = TokenProvider::new(&credentials(&uri), TIMEOUT).unwrap();
    let err = provider.authorization().unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(err.code().is_transient());
    assert_no_secrets(&format!("{err} {err:?}"), &[]);
}

#[test]
fn a_token_endpoint_that_does_not_answer_is_a_network_timeout() {
    let (release_tx, release) = mpsc::channel::<()>();
    let release = Mutex::new(release);
    let server = StubServer::start(move |_| {
        // Answers only once the test is over (the sender dropped).
        let _ = release.lock().unwrap().recv();
        token_answer("too-late", 3600)
    });
    // Dropped before the server, whose drop waits for the handler.
    let release_tx = release_tx;
    let provider = TokenProvider::new(
        &credentials(&token_uri(&server)),
        Duration::from_millis(200),
    )
    .unwrap();
    let err = provider.authorization().unwrap_err();
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    drop(release_tx);
}

#[test]
fn bad_key_material_is_an_invalid_argument_that_shows_no_key() {
    let good = key_json("https://oauth2.googleapis.com/token");
    let with = |change: &dyn Fn(&mut Value)| {
        let mut key = good.clone();
        change(&mut key);
        Credentials::ServiceAccountJson(key.to_string())
    };
    let private_key = good["private_key"].as_str().unwrap().to_owned();
    let cases = [
        Credentials::ServiceAccountJson("{\"type\": \"service_account\", ".to_owned()),
        Credentials::ServiceAccountJson(private_key.clone()),
        with(&|k| k["type"] = "authorized_user".into()),
        with(&|k| k["type"] = private_key.clone().into()),
        with(&|k| {
            k.as_object_mut().unwrap().remove("client_email");
        }),
        with(&|k| {
            k.as_object_mut().unwrap().remove("private_key_id");
        }),
        with(&|k| {
            k.as_object_mut().unwrap().remove("token_uri");
        }),
        with(&|k| k["private_key"] = Value::Null),
        with(&|k| k["private_key"] = private_key.replace("MII", "XXX").into()),
        with(&|k| k["private_key"] = private_key[..private_key.len() / 2].into()),
        with(&|k| k["token_uri"] = "http://oauth2.googleapis.com/token".into()),
        Credentials::ServiceAccountFile("/nonexistent/syncguard/key.json".into()),
        Credentials::Token(String::new()),
    ];
    for credentials in cases {
        let err = TokenProvider::new(&credentials, TIMEOUT).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert_no_secrets(&format!("{err} {err:?} {credentials:?}"), &[]);
    }
}

#[test]
fn debug_output_shows_no_secret() {
    let server = StubServer::start(|_| token_answer("ya29.cached-token", 3600));
    let json = key_json(&token_uri(&server)).to_string();
    let provider =
        TokenProvider::new(&Credentials::ServiceAccountJson(json.clone()), TIMEOUT).unwrap();
    provider.authorization().unwrap();
    let assertion = assertion_of(&server.requests()[0]);
    let shown = format!(
        "{:?} {provider:?} {:?} {:?}",
        Credentials::ServiceAccountJson(json),
        Credentials::Token("ya29.fixed-token".to_owned()),
        TokenProvider::new(&Credentials::Token("ya29.fixed-token".to_owned()), TIMEOUT).unwrap(),
    );
    assert!(shown.contains(EMAIL), "{shown}");
    assert_no_secrets(
        &shown,
        &["ya29.cached-token", "ya29.fixed-token", &assertion],
    );
}

#[test]
fn a_fixed_token_is_sent_as_is() {
    let provider = TokenProvider::new(&Credentials::Token("owner".to_owned()), TIMEOUT).unwrap();
    assert_eq!(provider.authorization().unwrap(), "Bearer owner");
}

/// The stub the tests above rely on: keep-alive, both kinds of request body, and a bad
/// request or a panicking handler costing only its own connection.
#[test]
fn the_stub_server_speaks_enough_http() {
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;

    let server = StubServer::start(|request| {
        assert!(request.path != "/panic", "asked to panic");
        StubResponse::json(
            200,
            json!({ "path": request.path, "body": String::from_utf8_lossy(&request.body) }),
        )
    });
    let exchange = |raw: &[u8]| {
        let mut connection = TcpStream::connect(server.host()).unwrap();
        connection.write_all(raw).unwrap();
        let mut answer = String::new();
        // The server closes the connection after the last request (or a bad one).
        connection.read_to_string(&mut answer).unwrap();
        answer
    };

    let answer = exchange(
        b"POST /one?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello\
          POST /two HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\
          Connection: close\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: t\r\n\r\n",
    );
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 2, "{answer}");
    assert!(answer.contains("HTTP/1.1 100 Continue"), "{answer}");
    assert!(
        answer.contains(r#"{"body":"hello","path":"/one?x=1"}"#),
        "{answer}"
    );
    assert!(
        answer.contains(r#"{"body":"abcde","path":"/two"}"#),
        "{answer}"
    );

    let answer = exchange(b"nonsense\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let answer = exchange(b"GET / HTTP/1.1\r\nContent-Length: lots\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let answer = exchange(b"GET /panic HTTP/1.1\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 500 "), "{answer}");
    assert!(answer.contains("asked to panic"), "{answer}");
    let answer = exchange(b"GET /after HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");

    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/one?x=1", "/two", "/panic", "/after"]);
    assert_eq!(server.requests()[0].header("HOST"), Some("h"));
}

/// Set in the child process `credentials_from_the_environment` starts: which credentials to
/// use and what `authorization()` must give (`Bearer …` or `error:Code`).
const CHILD_CREDENTIALS: &str = "SYNCGUARD_TEST_CHILD_CREDENTIALS";
const CHILD_EXPECT: &str = "SYNCGUARD_TEST_CHILD_EXPECT";

/// `GCE_METADATA_HOST`, `GOOGLE_APPLICATION_CREDENTIALS`, `CLOUDSDK_CONFIG` and `HOME` are
/// process-wide, and changing the environment while other test threads run is undefined
/// behaviour: each case runs this test binary again, in a child process with the environment
/// it needs (and a `HOME` of its own, so that the developer's gcloud login never counts).
#[test]
fn credentials_from_the_environment() {
    let metadata = StubServer::start(|request| {
        if request.path == METADATA_TOKEN_PATH
            && request.header("metadata-flavor") == Some("Google")
        {
            token_answer("metadata-token", 3599)
        } else {
            StubResponse::json(403, json!({ "error": "missing Metadata-Flavor header" }))
        }
    });
    // Service-account keys get `key-file-token`; users `user-token-CLIENT_ID`.
    let token_endpoint = StubServer::start(|request| {
        let form = request.form();
        match form.iter().find(|(name, _)| name == "client_id") {
            Some((_, client)) => token_answer(&format!("user-token-{client}"), 3600),
            None => token_answer("key-file-token", 3600),
        }
    });
    let dir = support::scratch_dir("firestore-auth-env");
    let write = |path: &std::path::Path, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let user = |client: &str| {
        json!({
            "type": "authorized_user", "client_id": client, "client_secret": "secret",
            "refresh_token": "refresh", "token_uri": token_uri(&token_endpoint),
        })
        .to_string()
    };
    const WELL_KNOWN: &str = "application_default_credentials.json";
    let key_file = write(
        &dir.join("key.json"),
        &key_json(&token_uri(&token_endpoint)).to_string(),
    );
    let env_user = write(&dir.join("env-user.json"), &user("env-client"));
    let home = dir.join("home");
    write(
        &home.join(".config").join("gcloud").join(WELL_KNOWN),
        &user("home-client"),
    );
    let config = dir.join("gcloud-config");
    write(&config.join(WELL_KNOWN), &user("config-client"));
    let bad_config = dir.join("bad-gcloud-config");
    write(
        &bad_config.join(WELL_KNOWN),
        "{\"refresh_token\": \"hunter2",
    );
    let empty_home = dir.join("empty-home");
    std::fs::create_dir_all(&empty_home).unwrap();
    let [home, config, bad_config, empty_home] =
        [home, config, bad_config, empty_home].map(|path| path.to_str().unwrap().to_owned());
    let metadata_host = metadata.host();
    let child_test = child::test_name!(credentials_from_the_environment_child);

    // Which credentials, the environment, what `authorization()` must give.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 9] = [
        (
            "metadata",
            &[("GCE_METADATA_HOST", &metadata_host)],
            "Bearer metadata-token",
        ),
        // The variable first, over gcloud's file.
        (
            "default",
            &[
                ("GOOGLE_APPLICATION_CREDENTIALS", &key_file),
                ("HOME", &home),
                ("GCE_METADATA_HOST", &metadata_host),
            ],
            "Bearer key-file-token",
        ),
        // Any type of file.
        (
            "default",
            &[
                ("GOOGLE_APPLICATION_CREDENTIALS", &env_user),
                ("HOME", &home),
            ],
            "Bearer user-token-env-client",
        ),
        // Then gcloud's file, in CLOUDSDK_CONFIG or else under HOME.
        (
            "default",
            &[
                ("GOOGLE_APPLICATION_CREDENTIALS", ""),
                ("HOME", &home),
                ("GCE_METADATA_HOST", &metadata_host),
            ],
            "Bearer user-token-home-client",
        ),
        (
            "default",
            &[
                ("CLOUDSDK_CONFIG", &config),
                ("HOME", &home),
                ("GCE_METADATA_HOST", &metadata_host),
            ],
            "Bearer user-token-config-client",
        ),
        // Then the metadata server.
        (
            "default",
            &[
                ("GOOGLE_APPLICATION_CREDENTIALS", ""),
                ("GCE_METADATA_HOST", &metadata_host),
            ],
            "Bearer metadata-token",
        ),
        // A file that is there must be usable: no falling through.
        (
            "default",
            &[(
                "GOOGLE_APPLICATION_CREDENTIALS",
                "/nonexistent/syncguard/key.json",
            )],
            "error:InvalidArgument",
        ),
        (
            "default",
            &[
                ("CLOUDSDK_CONFIG", &bad_config),
                ("GCE_METADATA_HOST", &metadata_host),
            ],
            "error:InvalidArgument",
        ),
        (
            "metadata",
            &[("GCE_METADATA_HOST", "http://not-a-host/")],
            "error:InvalidArgument",
        ),
    ];
    for (credentials, env, expect) in cases {
        let mut process = child::one_test(child_test);
        process
            .env(CHILD_CREDENTIALS, credentials)
            .env(CHILD_EXPECT, expect);
        for name in [
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GCE_METADATA_HOST",
            "CLOUDSDK_CONFIG",
            "APPDATA",
            "ALL_PROXY",
            "all_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
        ] {
            process.env_remove(name);
        }
        process.env("HOME", &empty_home);
        process.envs(env.iter().copied());
        let output = process.output().unwrap();
        if let Some(failure) = child::failure(
            child_test,
            output.status,
            &String::from_utf8_lossy(&output.stdout),
            &String::from_utf8_lossy(&output.stderr),
        ) {
            panic!("{credentials} with {env:?} should give {expect}: {failure}");
        }
    }

    let requests = metadata.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    for request in &requests {
        assert_eq!(request.method, "GET");
        assert_eq!(request.path, METADATA_TOKEN_PATH);
        assert_eq!(request.header("Metadata-Flavor"), Some("Google"));
        assert_eq!(request.header("authorization"), None);
    }
    let requests = token_endpoint.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    assert!(requests.iter().all(|request| request.method == "POST"));
}

/// One case of `credentials_from_the_environment`, in its own process; on its own it does
/// nothing.
#[test]
#[ignore = "run by credentials_from_the_environment, in a child process with its own environment"]
fn credentials_from_the_environment_child() {
    let (Ok(which), Ok(expect)) = (
        std::env::var(CHILD_CREDENTIALS),
        std::env::var(CHILD_EXPECT),
    ) else {
        return;
    };
    let credentials = match which.as_str() {
        "default" => Credentials::Default,
        "metadata" => Credentials::MetadataServer,
        other => panic!("unknown credentials {other:?}"),
    };
    let got = TokenProvider::new(&credentials, TIMEOUT).and_then(|p| p.authorization());
    match (got, expect.strip_prefix("error:")) {
        (Ok(authorization), None) => assert_eq!(authorization, expect),
        (Err(err), Some(code)) => {
            assert_eq!(err.code().as_str(), code, "{err}");
            assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
        }
        (got, _) => panic!("expected {expect}, got {got:?}"),
    }
}
