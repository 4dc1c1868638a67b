//! TLS for a node: the certificate it serves, and the CA it trusts when it calls its peers.
//! rustls with the ring provider on both sides, given to each config rather than installed for
//! the process.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use super::BoxResult;

/// A node's TLS setting, as PEM text (what the files given to `kv_node --tls-cert`,
/// `--tls-key` and `--tls-ca` hold). TLS encrypts the traffic and proves each node to its
/// callers; callers are not asked for certificates, so a cluster that must keep out anyone who
/// can reach its port sets a token as well.
#[derive(Clone)]
pub struct TlsConfig {
    /// The node's certificate chain, its own certificate first. It must name the host name or
    /// IP address peers and clients reach the node by (its address in the cluster).
    pub cert_chain: Vec<u8>,
    /// The private key of the node's certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: Vec<u8>,
    /// The CA certificates the node trusts when it calls its peers, and only these.
    pub ca: Vec<u8>,
}

// By hand: the derived one would print the private key wherever a config is logged.
impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cert_chain", &format_args!("{} bytes of PEM", self.cert_chain.len()))
            .field("key", &format_args!("(hidden)"))
            .field("ca", &format_args!("{} bytes of PEM", self.ca.len()))
            .finish()
    }
}

impl TlsConfig {
    /// What accepts the node's connections: a handshake with its certificate, then HTTP/1.1.
    pub fn acceptor(&self) -> BoxResult<TlsAcceptor> {
        let certs = CertificateDer::pem_slice_iter(&self.cert_chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("TLS certificate chain: {e}"))?;
        if certs.is_empty() {
            return Err("TLS certificate chain: no certificate in the PEM".into());
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key)
            .map_err(|e| format!("TLS private key: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("TLS certificate and key: {e}"))?;
        // A client that offers h2 too (curl does) settles on the one version served in the
        // handshake, rather than after it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// The node's client for its calls to peers: https only, trusting the CA and nothing else
    /// (no system or built-in roots: the cluster's CA is usually private).
    pub fn peer_client(&self) -> BoxResult<reqwest::Client> {
        let certs = reqwest::Certificate::from_pem_bundle(&self.ca)
            .map_err(|e| format!("TLS CA bundle: {e}"))?;
        if certs.is_empty() {
            return Err("TLS CA bundle: no certificate in the PEM".into());
        }
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .https_only(true);
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
        Ok(builder.build().map_err(|e| format!("TLS CA bundle: {}", with_causes(&e)))?)
    }
}

/// An error and what caused it, on one line: reqwest's own message leaves out rustls' reason.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
