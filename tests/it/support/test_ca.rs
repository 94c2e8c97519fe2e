//! Certificates for the TLS tests, made at test time with the `openssl` command: a test CA, a
//! server certificate it signs for `localhost` (SAN `DNS:localhost` only, so reaching the server
//! as `127.0.0.1` is a name mismatch), one for `firestore.googleapis.com` and
//! `oauth2.googleapis.com` (what a TLS-inspecting proxy presents for Firestore and for Google's
//! token endpoint), and a second, unrelated CA.
//!
//! `openssl` rather than a certificate crate: it is on every machine that runs these tests
//! (`.ci/run` installs it), and adds nothing to the crate's dependency tree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::{require_program, scratch_dir};

/// A server certificate and its private key, as PEM files.
pub struct ServerCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every file the TLS tests use.
pub struct TestCerts {
    /// The CA that signs both server certificates (PEM).
    pub ca: PathBuf,
    /// A CA that signed nothing here (PEM).
    pub other_ca: PathBuf,
    /// For `localhost` only.
    pub localhost: ServerCert,
    /// For `firestore.googleapis.com` and `oauth2.googleapis.com`.
    pub firestore: ServerCert,
}

/// The certificates, made once per test process.
pub fn test_certs() -> &'static TestCerts {
    static CERTS: OnceLock<TestCerts> = OnceLock::new();
    CERTS.get_or_init(|| make(&scratch_dir("test-ca")))
}

fn make(dir: &Path) -> TestCerts {
    let ca = make_ca(dir, "ca", "syncguard test CA");
    let other_ca = make_ca(dir, "other-ca", "syncguard unrelated CA");
    TestCerts {
        localhost: make_server(dir, "localhost", &["localhost"], &ca),
        firestore: make_server(
            dir,
            "firestore",
            &["firestore.googleapis.com", "oauth2.googleapis.com"],
            &ca,
        ),
        ca: ca.cert,
        other_ca: other_ca.cert,
    }
}

/// A self-signed CA certificate (P-256) valid for two days.
fn make_ca(dir: &Path, name: &str, common_name: &str) -> ServerCert {
    let config = dir.join(format!("{name}.cnf"));
    std::fs::write(
        &config,
        format!(
            "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = ext\n\
             [dn]\nCN = {common_name}\n\
             [ext]\nbasicConstraints = critical, CA:TRUE\n\
             keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n"
        ),
    )
    .expect("write the CA's openssl config");
    let files = ServerCert {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    request_with_new_key(&[
        "-x509",
        "-days",
        "2",
        "-config",
        path(&config),
        "-keyout",
        path(&files.key),
        "-out",
        path(&files.cert),
    ]);
    files
}

/// A server certificate for `dns_names` alone, signed by `ca`. Good for TLS clients too
/// (`clientAuth`): the nodes of a TLS Redis Cluster present it to each other on their bus.
fn make_server(dir: &Path, name: &str, dns_names: &[&str], ca: &ServerCert) -> ServerCert {
    let alt_names: Vec<String> = dns_names.iter().map(|dns| format!("DNS:{dns}")).collect();
    let alt_names = alt_names.join(",");
    let request = dir.join(format!("{name}.csr"));
    let extensions = dir.join(format!("{name}.ext"));
    std::fs::write(
        &extensions,
        format!(
            "subjectAltName = {alt_names}\nbasicConstraints = critical, CA:FALSE\n\
             keyUsage = critical, digitalSignature\nextendedKeyUsage = serverAuth, clientAuth\n\
             subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n"
        ),
    )
    .expect("write the server certificate's extensions");
    let files = ServerCert {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    let subject = format!("/CN={}", dns_names[0]);
    request_with_new_key(&[
        "-subj",
        &subject,
        "-keyout",
        path(&files.key),
        "-out",
        path(&request),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        path(&request),
        "-CA",
        path(&ca.cert),
        "-CAkey",
        path(&ca.key),
        "-set_serial",
        "1",
        "-days",
        "2",
        "-extfile",
        path(&extensions),
        "-out",
        path(&files.cert),
    ]);
    files
}

fn path(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

/// Runs `openssl args`, failing the test with its output if it fails.
/// `openssl req -new` with a new, unencrypted P-256 key, and `args`.
fn request_with_new_key(args: &[&str]) {
    let mut all = vec![
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    all.extend_from_slice(args);
    openssl(&all);
}

fn openssl(args: &[&str]) {
    let program = require_program("openssl", "openssl");
    let output = Command::new(program)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        output.status.success(),
        "openssl {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
