//! TLS for clients (rustls, ring provider): the acceptor built from PEM files.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::{self, pki_types::CertificateDer, pki_types::PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Why the TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("{path} holds no PEM private key")]
    NoKey { path: String },
    #[error("invalid certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// An acceptor for the certificate chain and private key in the given PEM files.
///
/// # Errors
/// Unreadable files, files without a certificate or key, or a key that does not match.
pub fn acceptor(cert_path: &Path, key_path: &Path) -> Result<TlsAcceptor, TlsError> {
    let certs = read_pem(cert_path, |data| {
        rustls_pemfile::certs(&mut &data[..]).collect::<Result<Vec<CertificateDer<'static>>, _>>()
    })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.display().to_string(),
        });
    }
    let key: Option<PrivateKeyDer<'static>> =
        read_pem(key_path, |data| rustls_pemfile::private_key(&mut &data[..]))?;
    let key = key.ok_or_else(|| TlsError::NoKey {
        path: key_path.display().to_string(),
    })?;
    // One provider chosen explicitly, so linking another crypto backend later cannot make
    // the builder panic for want of a process default.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_pem<T>(
    path: &Path,
    parse: impl FnOnce(&[u8]) -> std::io::Result<T>,
) -> Result<T, TlsError> {
    let err = |source| TlsError::Read {
        path: path.display().to_string(),
        source,
    };
    let data = std::fs::read(path).map_err(err)?;
    parse(&data).map_err(err)
}
