//! TLS: one trust policy for every backend (`src/tls.rs`), against real TLS servers — Redis (one
//! server and a Cluster) and
//! PostgreSQL with TLS on, and Firestore behind a TLS-inspecting proxy — whose certificates come
//! from a test CA made at test time (`support::test_ca`).
//!
//! For each backend: the CA given as a CA file is trusted and a lock cycle works; without it,
//! or with an unrelated CA, the certificate is not trusted (unknown issuer); reaching a server
//! by a name its certificate does not list fails naming the mismatch. And the process-wide
//! rustls provider: PostgreSQL and Firestore never touch it; Redis (forced by redis-rs) installs
//! *ring* only when the application has installed none. Those run in child processes of their
//! own, whose rustls default nothing else has set.

#[cfg(any(feature = "redis", feature = "postgres"))]
use std::path::Path;

use syncguard::{ErrorCode, LockError};

#[cfg(feature = "postgres")]
use crate::support::TestCerts;
use crate::support::test_certs;

/// Fails unless `err` is `ServiceUnavailable` and its message contains every one of `parts`.
#[track_caller]
fn assert_tls_error(err: &LockError, parts: &[&str]) {
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    for part in parts {
        assert!(err.message().contains(part), "{part:?} missing from: {err}");
    }
}

/// Runs `scenario` with the name of the scenario a child process was started for (its parent
/// set `SYNCGUARD_TLS_SCENARIO`); does nothing in a normal run, where no parent set it.
#[cfg(feature = "firestore")]
fn in_the_child(scenario: impl FnOnce(&str)) {
    if let Ok(name) = std::env::var("SYNCGUARD_TLS_SCENARIO") {
        scenario(&name);
    }
}

/// The environment variable `name` a child's parent set.
#[cfg(feature = "firestore")]
fn child_env(name: &str) -> String {
    std::env::var(name).expect(name)
}

/// What a certificate no root vouches for is reported as.
const UNTRUSTED: &str = "the server's certificate is not trusted (unknown issuer)";
/// What a certificate for another name is reported as.
const WRONG_NAME: &str = "the server's certificate is not valid for the name connected to";

#[cfg(any(feature = "redis", feature = "postgres"))]
fn path(path: &Path) -> String {
    path.display().to_string()
}

/// The server in `server`, started with the test certificates on first use and shared by the
/// tests from then on.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn started_once<T>(
    server: &'static std::sync::OnceLock<T>,
    start: impl FnOnce(&'static crate::support::TestCerts) -> T,
) -> &'static T {
    server.get_or_init(|| start(test_certs()))
}

#[cfg(feature = "redis")]
mod redis {
    use std::sync::OnceLock;

    use syncguard::redis::{KeyLayout, RedisBackend};

    use super::*;
    use crate::support::{ClusterTls, RedisCluster, RedisServer, assert_lock_cycle, unique};

    /// A TLS-only Redis presenting the `localhost` certificate, shared by these tests.
    pub(super) fn tls_redis() -> &'static RedisServer {
        static SERVER: OnceLock<RedisServer> = OnceLock::new();
        started_once(&SERVER, |certs| {
            RedisServer::start_tls(&certs.localhost.cert, &certs.localhost.key, &certs.ca)
        })
    }

    #[test]
    fn the_ca_file_is_trusted() {
        trusted_with_the_ca_file(&tls_redis().url(), "tls-redis", |backend| {
            assert_lock_cycle(backend, &unique("tls-redis"))
        });
    }

    /// The test CA as a CA file, given to the builder (`cycles` runs on that backend) and in
    /// the URL (one lock cycle).
    fn trusted_with_the_ca_file(url: &str, name: &str, cycles: impl FnOnce(&RedisBackend)) {
        let ca = &test_certs().ca;
        let backend = RedisBackend::builder()
            .url(url)
            .tls_ca_file(ca)
            .build()
            .unwrap();
        cycles(&backend);
        let url = format!("{url}?tls_ca_file={}", path(ca));
        assert_lock_cycle(
            &RedisBackend::connect(&url).unwrap(),
            &unique(&format!("{name}-url")),
        );
    }

    #[test]
    fn without_the_ca_the_certificate_is_not_trusted() {
        untrusted_without_the_ca(&tls_redis().url(), "cannot connect to Redis at localhost:");
    }

    /// Connecting to `url` without the CA fails: the certificate is not trusted, and the
    /// message says what was reached (`reached`).
    #[track_caller]
    fn untrusted_without_the_ca(url: &str, reached: &str) {
        let err = RedisBackend::connect(url).unwrap_err();
        assert_tls_error(&err, &[reached, UNTRUSTED]);
    }

    #[test]
    fn another_ca_does_not_vouch_for_the_certificate() {
        let err = refused_with_ca_file(tls_redis().url(), &test_certs().other_ca);
        assert_tls_error(&err, &[UNTRUSTED, "tls_ca_file"]);
    }

    /// The error of building a backend for `url` that trusts the CA file `ca`.
    fn refused_with_ca_file(url: String, ca: &Path) -> LockError {
        RedisBackend::builder()
            .url(url)
            .tls_ca_file(ca)
            .build()
            .unwrap_err()
    }

    /// A Cluster of three primaries that serve TLS (bus included) with the `localhost`
    /// certificate and announce themselves by that name.
    fn tls_cluster() -> &'static RedisCluster {
        static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
        started_once(&CLUSTER, |certs| {
            RedisCluster::start_tls(ClusterTls {
                cert: &certs.localhost.cert,
                key: &certs.localhost.key,
                ca: &certs.ca,
            })
        })
    }

    #[test]
    fn a_cluster_trusts_the_ca_file() {
        let cluster = tls_cluster();
        trusted_with_the_ca_file(&cluster.tls_url(), "tls-cluster", |backend| {
            // A lock on every primary: the client opens a TLS connection to each node it is
            // sent to.
            let mut reached = std::collections::BTreeSet::new();
            for n in 0.. {
                let key = unique(&format!("tls-cluster-{n}"));
                let record = KeyLayout::Cluster.lock_key("syncguard", &key).unwrap();
                let asked = cluster.nodes[0].port;
                let primary = cluster.primary_of(cluster.key_slot(&record), asked);
                if reached.insert(primary.expect("a primary serves the slot")) {
                    assert_lock_cycle(backend, &key);
                }
                if reached.len() == cluster.nodes.len() {
                    break;
                }
            }
        });
    }

    #[test]
    fn a_cluster_without_the_ca_is_not_trusted() {
        untrusted_without_the_ca(
            &tls_cluster().tls_url(),
            "Redis at cluster nodes localhost:",
        );
    }

    #[test]
    fn an_address_the_certificate_does_not_name_is_refused() {
        let url = format!("rediss://127.0.0.1:{}/", tls_redis().port);
        let err = refused_with_ca_file(url, &test_certs().ca);
        assert_tls_error(&err, &[WRONG_NAME, "not valid for name \"127.0.0.1\""]);
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::OnceLock;

    use syncguard::postgres::PostgresBackend;

    use super::*;
    use crate::support::{PgServer, assert_lock_cycle, unique};

    /// A PostgreSQL cluster with TLS on, presenting the `localhost` certificate.
    pub(super) fn tls_postgres() -> &'static PgServer {
        static SERVER: OnceLock<PgServer> = OnceLock::new();
        started_once(&SERVER, |certs| {
            PgServer::start_with_tls(&certs.localhost.cert, &certs.localhost.key)
        })
    }

    /// `postgres://…@localhost:PORT/postgres?sslmode=verify-full&sslrootcert=CA`.
    pub(super) fn verified_url(server: &PgServer, certs: &TestCerts) -> String {
        verify_full(&server.localhost_url(), &certs.ca)
    }

    /// `base?sslmode=verify-full&sslrootcert=CA`.
    fn verify_full(base: &str, ca: &Path) -> String {
        format!("{base}?sslmode=verify-full&sslrootcert={}", path(ca))
    }

    #[test]
    fn the_ca_file_is_trusted() {
        let (server, certs) = (tls_postgres(), test_certs());
        let backend = PostgresBackend::connect(&verified_url(server, certs)).unwrap();
        backend.setup_schema().unwrap();
        assert_lock_cycle(&backend, &unique("tls-postgres"));
        // The same, with the builder's option.
        let backend = PostgresBackend::builder()
            .url(format!("{}?sslmode=verify-full", server.localhost_url()))
            .tls_ca_file(&certs.ca)
            .build()
            .unwrap();
        assert_lock_cycle(&backend, &unique("tls-postgres-builder"));
    }

    #[test]
    fn without_the_ca_the_certificate_is_not_trusted() {
        // sslmode=require verifies as fully as verify-full.
        for mode in ["require", "verify-ca", "verify-full"] {
            let url = format!("{}?sslmode={mode}", tls_postgres().localhost_url());
            refused(
                &url,
                &[
                    "PostgreSQL at localhost:",
                    "TLS handshake failed",
                    UNTRUSTED,
                ],
            );
        }
    }

    #[test]
    fn another_ca_does_not_vouch_for_the_certificate() {
        let url = verify_full(&tls_postgres().localhost_url(), &test_certs().other_ca);
        refused(&url, &[UNTRUSTED, "sslrootcert"]);
    }

    #[test]
    fn an_address_the_certificate_does_not_name_is_refused() {
        let url = verify_full(&tls_postgres().url(), &test_certs().ca);
        refused(&url, &[WRONG_NAME, "not valid for name \"127.0.0.1\""]);
    }

    /// Fails unless connecting to `url` is refused with a TLS error naming every one of `parts`.
    #[track_caller]
    fn refused(url: &str, parts: &[&str]) {
        assert_tls_error(&PostgresBackend::connect(url).unwrap_err(), parts);
    }
}

/// Firestore over HTTPS, through a TLS-inspecting proxy in front of the emulator: the backend
/// talks to `firestore.googleapis.com` as in production, and the proxy answers for it. The
/// backend finds the proxy in `HTTPS_PROXY`, so each test runs in a child process with its own
/// environment.
#[cfg(feature = "firestore")]
mod firestore {
    use std::process::Output;

    use syncguard::LockBackend as _;
    use syncguard::firestore::{Credentials, FirestoreBackend, FirestoreBuilder};

    use super::*;
    use crate::support::child::{assert_output_passed, one_test, test_name};
    use crate::support::tls_proxy::TlsInterceptor;
    use crate::support::{
        FIRESTORE_PROJECT, ServerCert, assert_lock_cycle, shared_firestore, unique,
    };

    /// A proxy in front of [`shared_firestore`] presenting `cert`.
    pub(super) fn interceptor(cert: &ServerCert) -> TlsInterceptor {
        let upstream = shared_firestore()
            .host()
            .parse()
            .expect("the emulator's address");
        TlsInterceptor::start(&cert.cert, &cert.key, upstream)
    }

    /// Runs the ignored test `name` in a child process that reaches the Internet through
    /// `proxy` (and nothing else: the emulator variable and other proxy settings removed),
    /// with `scenario`, the test CAs and `extra` in its environment.
    pub(super) fn in_child(
        name: &str,
        scenario: &str,
        proxy: &TlsInterceptor,
        extra: &[(&str, String)],
    ) -> Output {
        let certs = test_certs();
        let mut command = one_test(name);
        for variable in [
            "ALL_PROXY",
            "all_proxy",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "NO_PROXY",
            "no_proxy",
            "FIRESTORE_EMULATOR_HOST",
        ] {
            command.env_remove(variable);
        }
        command
            .env("HTTPS_PROXY", proxy.url())
            .env("SYNCGUARD_TLS_SCENARIO", scenario)
            .env("SYNCGUARD_TLS_CA", &certs.ca)
            .env("SYNCGUARD_TLS_OTHER_CA", &certs.other_ca)
            .envs(extra.iter().map(|(name, value)| (name, value)));
        command.output().expect("run the child test")
    }

    /// A production backend (HTTPS to `firestore.googleapis.com`) with the emulator's token.
    pub(super) fn production() -> FirestoreBuilder {
        FirestoreBackend::builder()
            .project(FIRESTORE_PROJECT)
            .production()
            .credentials(Credentials::Token("owner".to_owned()))
    }

    fn run(scenario: &str, cert: &ServerCert) {
        let proxy = interceptor(cert);
        let name = test_name!(worker);
        assert_output_passed(name, &in_child(name, scenario, &proxy, &[]));
        assert!(
            proxy
                .connects()
                .iter()
                .all(|target| target == "firestore.googleapis.com:443"
                    || target == "oauth2.googleapis.com:443"),
            "{:?}",
            proxy.connects()
        );
        assert!(
            !proxy.connects().is_empty(),
            "the child never used the proxy"
        );
    }

    /// A test per scenario of the child's: `test => (scenario, the certificate the proxy
    /// presents)`.
    macro_rules! scenarios {
        ($($test:ident => ($scenario:literal, $cert:ident)),* $(,)?) => {$(
            #[test]
            fn $test() {
                run($scenario, &test_certs().$cert);
            }
        )*};
    }

    scenarios!(
        the_ca_file_is_trusted => ("trusted", firestore),
        without_the_ca_the_certificate_is_not_trusted => ("untrusted", firestore),
        another_ca_does_not_vouch_for_the_certificate => ("other-ca", firestore),
        a_certificate_for_another_name_is_refused => ("wrong-name", localhost),
    );

    /// The child's half of the tests above.
    #[test]
    #[ignore = "run by the tests above, in a child process"]
    fn worker() {
        in_the_child(|scenario| {
            let (ca, other_ca) = (
                child_env("SYNCGUARD_TLS_CA"),
                child_env("SYNCGUARD_TLS_OTHER_CA"),
            );
            let key = unique("tls-firestore");
            match scenario {
                "trusted" => {
                    let backend = production().tls_ca_file(&ca).build().unwrap();
                    assert_lock_cycle(&backend, &key);
                    // The URL's parameter reaches the same option.
                    let missing = format!("{ca}.missing");
                    let err = FirestoreBackend::connect(&format!(
                        "firestore://{FIRESTORE_PROJECT}?tls_ca_file={missing}"
                    ))
                    .unwrap_err();
                    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
                    assert!(
                        err.message()
                            .starts_with(&format!("the CA file {missing} cannot be read")),
                        "{err}"
                    );
                    // Token requests trust the same CA: the handshake with Google's token
                    // endpoint (the proxy answers for it too) succeeds, and the emulator behind
                    // the proxy then refuses the request: a refusal, not a TLS failure.
                    let user = serde_json::json!({
                        "type": "authorized_user",
                        "client_id": "client.apps",
                        "client_secret": "client-secret",
                        "refresh_token": "refresh-token",
                    });
                    let err = production()
                        .credentials(Credentials::Json(user.to_string()))
                        .tls_ca_file(&ca)
                        .build()
                        .unwrap()
                        .is_locked(&key)
                        .unwrap_err();
                    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
                    assert!(!err.message().contains("certificate"), "{err}");
                }
                "untrusted" | "other-ca" | "wrong-name" => {
                    let builder = match scenario {
                        "untrusted" => production(),
                        "other-ca" => production().tls_ca_file(&other_ca),
                        _ => production().tls_ca_file(&ca),
                    };
                    let err = builder.build().unwrap().is_locked(&key).unwrap_err();
                    let expected: &[&str] = match scenario {
                        "wrong-name" => &[
                            WRONG_NAME,
                            "not valid for name \"firestore.googleapis.com\"",
                        ],
                        _ => &[UNTRUSTED, "tls_ca_file"],
                    };
                    assert_tls_error(&err, expected);
                    assert!(err.message().contains("firestore.googleapis.com"), "{err}");
                }
                other => panic!("unknown scenario {other}"),
            }
        });
    }
}

/// rustls' process-wide default provider, in child processes where nothing else set it.
#[cfg(all(feature = "redis", feature = "postgres", feature = "firestore"))]
mod provider {
    use rustls::crypto::CryptoProvider;
    use syncguard::postgres::PostgresBackend;
    use syncguard::redis::RedisBackend;

    use super::*;
    use crate::support::child::{assert_output_passed, test_name};
    use crate::support::{assert_lock_cycle, unique};

    /// TLS connections of PostgreSQL and Firestore leave the process default unset.
    #[test]
    fn postgres_and_firestore_leave_the_process_default_alone() {
        run("postgres-firestore");
    }

    /// redis-rs needs a default: with none installed, there is one after the first `rediss://`
    /// backend (syncguard's *ring*; in this dependency tree, which has *ring* alone, rustls
    /// would install the same from its features, so this pins the documented outcome rather
    /// than who installed it).
    #[test]
    fn redis_installs_ring_when_there_is_no_default() {
        run("redis-without-default");
    }

    /// An application's own provider stays the default, and Redis uses it.
    #[test]
    fn redis_keeps_the_applications_provider() {
        run("redis-with-default");
    }

    fn run(scenario: &str) {
        let certs = test_certs();
        // Started here, so the child only connects.
        let (redis, postgres) = (super::redis::tls_redis(), super::postgres::tls_postgres());
        let proxy = super::firestore::interceptor(&certs.firestore);
        let name = test_name!(worker);
        let output = super::firestore::in_child(
            name,
            scenario,
            &proxy,
            &[
                ("SYNCGUARD_TLS_REDIS_URL", redis.url()),
                (
                    "SYNCGUARD_TLS_POSTGRES_URL",
                    super::postgres::verified_url(postgres, certs),
                ),
            ],
        );
        assert_output_passed(name, &output);
    }

    /// The child's half of the tests above.
    #[test]
    #[ignore = "run by the tests above, in a child process"]
    fn worker() {
        in_the_child(|scenario| {
            assert!(
                CryptoProvider::get_default().is_none(),
                "the child starts without a default"
            );
            match scenario {
                "postgres-firestore" => {
                    let backend =
                        PostgresBackend::connect(&child_env("SYNCGUARD_TLS_POSTGRES_URL")).unwrap();
                    backend.setup_schema().unwrap();
                    assert_lock_cycle(&backend, &unique("tls-provider-postgres"));
                    let backend = super::firestore::production()
                        .tls_ca_file(child_env("SYNCGUARD_TLS_CA"))
                        .build()
                        .unwrap();
                    assert_lock_cycle(&backend, &unique("tls-provider-firestore"));
                    assert!(
                        CryptoProvider::get_default().is_none(),
                        "a backend installed a process-wide provider"
                    );
                }
                "redis-without-default" => {
                    let backend = RedisBackend::builder()
                        .url(child_env("SYNCGUARD_TLS_REDIS_URL"))
                        .tls_ca_file(child_env("SYNCGUARD_TLS_CA"))
                        .build()
                        .unwrap();
                    assert_lock_cycle(&backend, &unique("tls-provider-redis"));
                    assert!(CryptoProvider::get_default().is_some());
                }
                "redis-with-default" => {
                    // The application's own: ring with one cipher suite, recognisable afterwards.
                    let mut own = rustls::crypto::ring::default_provider();
                    own.cipher_suites.retain(|suite| {
                        suite.suite() == rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
                    });
                    own.install_default().unwrap();
                    let backend = RedisBackend::builder()
                        .url(child_env("SYNCGUARD_TLS_REDIS_URL"))
                        .tls_ca_file(child_env("SYNCGUARD_TLS_CA"))
                        .build()
                        .unwrap();
                    assert_lock_cycle(&backend, &unique("tls-provider-redis-own"));
                    let default = CryptoProvider::get_default().unwrap();
                    assert_eq!(default.cipher_suites.len(), 1, "the application's provider");
                }
                other => panic!("unknown scenario {other}"),
            }
        });
    }
}
