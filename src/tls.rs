//! The TLS client configuration of every backend, built in one place to one policy:
//!
//! * **Trust**: the system's root certificates (`rustls-native-certs`: `SSL_CERT_FILE`,
//!   `SSL_CERT_DIR`, or the platform's store), plus the CA certificates of an optional PEM file
//!   (`tls_ca_file`) — for a private CA, or a TLS-inspecting proxy whose CA is not installed
//!   system-wide. A system certificate that cannot be loaded is logged and skipped; only a
//!   connection left with no root at all fails.
//! * **Crypto**: *ring*, passed explicitly to each configuration (`builder_with_provider`), so
//!   nothing here reads or changes rustls' process-wide default provider. The Redis client is
//!   the one exception, forced by redis-rs: its client installs a process default when none is
//!   (`src/redis/client.rs`).
//! * **Verification**: always full (chain and host name); there is no switch to turn it off.
//!
//! Each backend takes the same [`TlsRoots`] in its client's form: a rustls `ClientConfig`
//! (PostgreSQL, Firestore), a PEM bundle (Redis).

use std::io::Read as _;
use std::path::Path;
#[cfg(any(feature = "postgres", feature = "firestore"))]
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::error::{ErrorCode, LockError, Result};

/// The largest CA file read: a bundle of every public root is about 200 KiB.
const MAX_CA_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The root certificates a TLS connection trusts: those of the system and of the CA file, each
/// one accepted by rustls as a trust anchor.
#[derive(Clone)]
pub(crate) struct TlsRoots {
    /// Only the rustls configuration reads it; filling it is what checks each root for all.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "firestore")),
        allow(dead_code)
    )]
    store: RootCertStore,
    /// The same certificates, as read (for the clients that take them so: redis-rs, as PEM).
    pub(crate) certs: Vec<CertificateDer<'static>>,
}

impl TlsRoots {
    /// The system's roots (when `system`) and those of `ca_file`. The CA file must exist and
    /// hold at least one valid certificate in PEM (`InvalidArgument` naming the path
    /// otherwise); a system certificate that cannot be loaded is logged and skipped.
    pub fn load(ca_file: Option<&Path>, system: bool) -> Result<TlsRoots> {
        let mut store = RootCertStore::empty();
        let mut certs = Vec::new();
        if system {
            let native = rustls_native_certs::load_native_certs();
            for error in &native.errors {
                log::warn!(
                    "syncguard: some of the system's root certificates could not be loaded \
                     (skipped): {error}"
                );
            }
            let mut unusable = 0;
            for cert in native.certs {
                match store.add(cert.clone()) {
                    Ok(()) => certs.push(cert),
                    Err(_) => unusable += 1,
                }
            }
            if unusable > 0 {
                log::debug!(
                    "syncguard: skipped {unusable} system root certificate(s) rustls cannot use"
                );
            }
        }
        if let Some(path) = ca_file {
            for cert in read_ca_file(path)? {
                store.add(cert.clone()).map_err(|e| {
                    LockError::invalid_argument(format!(
                        "the CA file {} holds a certificate that is not a valid CA certificate: \
                         {e}",
                        path.display()
                    ))
                })?;
                certs.push(cert);
            }
        }
        Ok(TlsRoots { store, certs })
    }

    /// Fails unless there is at least one root to trust: without one, every certificate is
    /// refused, and the cause is the deployment (no CA certificates installed), which retrying
    /// does not mend. `ca_option` names the option that adds roots, for the message.
    pub fn require_any(&self, ca_option: &str) -> Result<()> {
        if self.certs.is_empty() {
            return Err(LockError::new(
                ErrorCode::Internal,
                format!(
                    "no root certificates to verify TLS servers with: none could be loaded from \
                     the system (install the ca-certificates package, or point SSL_CERT_FILE at \
                     a bundle) and no {ca_option} was given"
                ),
            ));
        }
        Ok(())
    }

    /// A rustls client configuration trusting these roots, with *ring*.
    #[cfg(any(feature = "postgres", feature = "firestore"))]
    pub fn client_config(&self) -> Result<rustls::ClientConfig> {
        Ok(rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| LockError::internal(format!("TLS setup failed: {e}")))?
            .with_root_certificates(self.store.clone())
            .with_no_client_auth())
    }
}

/// A rustls configuration with the system's roots only, for clients built where no CA file is
/// known. Without any root, each TLS request fails instead (unknown issuer), and the reason is
/// logged here.
#[cfg(feature = "firestore")]
pub(crate) fn system_client_config() -> Result<Arc<rustls::ClientConfig>> {
    let roots = TlsRoots::load(None, true).unwrap_or(TlsRoots {
        store: RootCertStore::empty(),
        certs: Vec::new(),
    });
    if let Err(error) = roots.require_any("CA file") {
        log::error!("syncguard: {}", error.message());
    }
    Ok(Arc::new(roots.client_config()?))
}

/// The crypto provider of every configuration built here (redis-rs takes none: src/redis).
#[cfg(any(feature = "postgres", feature = "firestore"))]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file, or `InvalidArgument` naming the path (never its contents).
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let shown = path.display();
    let refuse = |why: String| LockError::invalid_argument(format!("the CA file {shown} {why}"));
    if path.as_os_str().is_empty() {
        return Err(LockError::invalid_argument("the CA file path is empty"));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CA_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| refuse(format!("cannot be read: {e}")))?;
    if bytes.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(refuse(format!(
            "is larger than {} MiB: not a CA bundle",
            MAX_CA_FILE_BYTES >> 20
        )));
    }
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| refuse(format!("is not valid PEM: {}", pem_problem(&e))))?;
    if certs.is_empty() {
        return Err(refuse(
            "holds no certificate (expected one or more PEM `BEGIN CERTIFICATE` sections)"
                .to_owned(),
        ));
    }
    Ok(certs)
}

/// What is wrong with a PEM file, without quoting it (a misnamed key file must not end up in
/// a message).
fn pem_problem(error: &rustls::pki_types::pem::Error) -> &'static str {
    use rustls::pki_types::pem::Error;
    match error {
        Error::MissingSectionEnd { .. } => "a section has no END line",
        Error::IllegalSectionStart { .. } => "a malformed BEGIN line",
        Error::Base64Decode(_) => "a section is not valid base64",
        _ => "malformed",
    }
}

/// The rustls error behind a client library's error, if TLS is what failed: found in the
/// chain of sources, also inside I/O errors (whose `source()` skips the error they wrap).
pub(crate) fn find_rustls_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = current
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            && let Some(tls) = find_rustls_error(inner)
        {
            return Some(tls);
        }
        next = current.source();
    }
    None
}

/// A TLS failure in an operator's words: for a certificate that is not trusted or names
/// another host, what that means and what to do; otherwise rustls' text. `ca_option` names how
/// this backend adds a CA (`tls_ca_file`, …).
pub(crate) fn describe(error: &rustls::Error, ca_option: &str) -> String {
    use rustls::CertificateError as Cert;
    match error {
        rustls::Error::InvalidCertificate(Cert::UnknownIssuer) => format!(
            "the server's certificate is not trusted (unknown issuer): the CA that signed it is \
             neither among the system's root certificates nor in the {ca_option}"
        ),
        rustls::Error::InvalidCertificate(
            cert @ (Cert::NotValidForName | Cert::NotValidForNameContext { .. }),
        ) => format!(
            "the server's certificate is not valid for the name connected to ({cert}): connect \
             by a name the certificate lists"
        ),
        rustls::Error::InvalidCertificate(cert) => {
            format!("the server's certificate was refused: {cert}")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the system's temporary directory.
    fn temp_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "syncguard-tls-{}-{}",
            std::process::id(),
            crate::driver::generate_lock_id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A CA file that is missing, empty, not PEM, or holds no certificate is refused, naming
    /// the path and never quoting the file.
    #[test]
    fn bad_ca_files_are_invalid_arguments_naming_the_path() {
        let key = b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END PRIVATE KEY-----\n";
        let broken = b"-----BEGIN CERTIFICATE-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n";
        let garbage = b"-----BEGIN CERTIFICATE-----\nc2VjcmV0\n-----END CERTIFICATE-----\n";
        let dir = temp_dir();
        let cases: [(&str, Option<&[u8]>, &str); 5] = [
            ("missing.pem", None, "cannot be read"),
            ("empty.pem", Some(b""), "holds no certificate"),
            ("key.pem", Some(key), "holds no certificate"),
            ("broken.pem", Some(broken), "is not valid PEM"),
            ("garbage.pem", Some(garbage), "not a valid CA certificate"),
        ];
        for (name, contents, why) in cases {
            let path = dir.join(name);
            if let Some(contents) = contents {
                std::fs::write(&path, contents).unwrap();
            }
            let err = TlsRoots::load(Some(&path), false).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(err.message().contains(&path.display().to_string()), "{err}");
            assert!(err.message().contains(why), "{err}");
            assert!(!err.message().contains("c2VjcmV0"), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_roots_at_all_is_an_error_naming_the_option() {
        let roots = TlsRoots::load(None, false).unwrap();
        let err = roots.require_any("tls_ca_file").unwrap_err();
        assert_eq!(err.code(), ErrorCode::Internal);
        assert!(err.message().contains("tls_ca_file"), "{err}");
    }

    #[test]
    fn certificate_errors_are_explained() {
        use rustls::CertificateError as Cert;
        let unknown = describe(
            &rustls::Error::InvalidCertificate(Cert::UnknownIssuer),
            "tls_ca_file",
        );
        assert!(
            unknown.contains("not trusted (unknown issuer)"),
            "{unknown}"
        );
        assert!(unknown.contains("tls_ca_file"), "{unknown}");
        let name = describe(
            &rustls::Error::InvalidCertificate(Cert::NotValidForName),
            "tls_ca_file",
        );
        assert!(name.contains("not valid for the name"), "{name}");
    }

    #[test]
    fn rustls_errors_are_found_inside_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls.clone());
        assert_eq!(find_rustls_error(&io), Some(&tls));
        let plain = std::io::Error::other("nothing to do with TLS");
        assert_eq!(find_rustls_error(&plain), None);
    }
}
