//! Making `redis::Client`s: the TLS roots they trust, and the process-wide rustls provider
//! redis-rs needs for `rediss://`.

use std::path::Path;
use std::sync::Arc;

use redis::{Client, IntoConnectionInfo};
use rustls::crypto::CryptoProvider;

use super::errors::Server;
use crate::error::{LockError, Result};
use crate::tls::TlsRoots;

/// Makes `redis::Client`s for one backend's URLs. For TLS (`rediss://` and friends): the
/// shared policy of [`crate::tls`] (the system's roots plus `ca_file`, given to redis-rs as one
/// PEM bundle, since roots it is given replace the system's, loaded once), and rustls'
/// process-default provider, which redis-rs insists on (see
/// [`ensure_process_provider`]).
#[derive(Clone)]
pub(crate) struct ClientFactory {
    roots: Option<Arc<Vec<u8>>>,
}

impl ClientFactory {
    pub fn new(tls: bool, ca_file: Option<&Path>) -> Result<ClientFactory> {
        if !tls {
            return Ok(ClientFactory { roots: None });
        }
        let roots = TlsRoots::load(ca_file, true)?;
        roots.require_any("tls_ca_file")?;
        ensure_process_provider();
        Ok(ClientFactory {
            roots: Some(Arc::new(pem_bundle(&roots))),
        })
    }

    /// The certificates to give redis-rs, for TLS.
    pub fn certificates(&self) -> Option<redis::TlsCertificates> {
        self.roots.as_ref().map(|pem| redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.as_ref().clone()),
        })
    }

    /// The client for `url`. Its connections skip `CLIENT SETINFO` (the library's name and
    /// version) when they open: redis-rs sends it in one pipeline with `AUTH` and `SELECT` and
    /// awaits every reply of that pipeline with the whole timeout, even after the first one
    /// timed out: a server that accepts connections and never answers would hold each connect
    /// for two timeouts more than those of `AUTH` and `SELECT` (the ones it needs).
    pub fn client(&self, url: &str, server: &Server) -> Result<Client> {
        let client = url.into_connection_info().and_then(|info| {
            let settings = info.redis_settings().clone().set_skip_set_lib_name();
            let info = info.set_redis_settings(settings);
            match self.certificates() {
                Some(certificates) => Client::build_with_tls(info, certificates),
                None => Client::open(info),
            }
        });
        client.map_err(|e| {
            LockError::invalid_argument(format!(
                "invalid Redis URL: {}",
                server.clean(&e.to_string())
            ))
        })
    }
}

/// Makes sure rustls has a process-wide default provider before redis-rs needs one.
///
/// redis-rs (1.8) builds the rustls configuration of every `rediss://` connection with
/// `rustls::ClientConfig::builder()`, which takes the process default and, when none is
/// installed and the crate features of the application's dependency tree do not pick exactly
/// one (*ring* and aws-lc-rs both present), panics; it offers no way to pass a provider or a
/// configuration (redis-rs issue #463). So, only for `rediss://`, and only if the application
/// has installed no provider of its own, syncguard installs *ring* as the default. An
/// application that wants another provider installs it before building a Redis backend, and
/// syncguard leaves it alone. PostgreSQL and Firestore never touch the default.
fn ensure_process_provider() {
    if CryptoProvider::get_default().is_some() {
        return;
    }
    // An error means another thread installed one meanwhile: that one is used.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_ok()
    {
        log::info!(
            "syncguard: installed rustls' ring provider as the process default, which the \
             redis client needs for rediss://; install your own provider before connecting to \
             choose another"
        );
    }
}

/// These roots as one PEM bundle: what redis-rs takes (`TlsCertificates::root_cert`), in
/// place of the system's store it would otherwise load.
fn pem_bundle(roots: &TlsRoots) -> Vec<u8> {
    use base64::Engine as _;
    let mut pem = String::new();
    for cert in &roots.certs {
        let encoded = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let mut rest = encoded.as_str();
        while !rest.is_empty() {
            let (line, tail) = rest.split_at(rest.len().min(64));
            pem.push_str(line);
            pem.push('\n');
            rest = tail;
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem.into_bytes()
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;

    use super::*;

    /// The bundle redis-rs is given holds exactly the roots loaded, and redis-rs accepts it
    /// (it refuses the whole client if any certificate does not parse).
    #[test]
    fn the_pem_bundle_round_trips() {
        let roots = TlsRoots::load(None, true).unwrap();
        let bundle = pem_bundle(&roots);
        let parsed: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bundle)
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(parsed, roots.certs);
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(bundle),
        };
        assert!(redis::Client::build_with_tls("rediss://h/", certificates).is_ok());
    }
}
