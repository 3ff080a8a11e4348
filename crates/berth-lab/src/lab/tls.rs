//! The certificate of the lab's TLS shapes: a CA of the lab's own and a server certificate it
//! signed for `127.0.0.1` (ECDSA P-256, as the nginx comparison asks), made fresh for
//! each run with rcgen and written as PEM files to the run's directory. Every server under a
//! TLS shape serves this same certificate, and the load generator verifies it against the CA:
//! no server gets a cheaper handshake than another.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// The PEM files of a run's certificate.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA's certificate: what the load generator trusts.
    pub ca: PathBuf,
    /// The server's certificate, then the CA's.
    pub cert: PathBuf,
    /// The server's private key (PKCS#8).
    pub key: PathBuf,
}

impl TlsFiles {
    /// Makes the CA and the server certificate in `dir`.
    pub fn make(dir: &Path) -> Result<TlsFiles, String> {
        let err = |e: rcgen::Error| format!("cannot make the lab's certificate: {e}");
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "berth lab CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(err)?)
            .map_err(err)?;
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(err)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "berth lab server");
        // rcgen's default key is ECDSA P-256 with SHA-256.
        let key = KeyPair::generate().map_err(err)?;
        let leaf = params.signed_by(&key, &ca).map_err(err)?;
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        let write = |path: &Path, text: String| {
            fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
        };
        write(&files.ca, ca.as_ref().pem())?;
        write(&files.cert, format!("{}{}", leaf.pem(), ca.as_ref().pem()))?;
        write(&files.key, key.serialize_pem())?;
        // nginx started by root reads its key as root, but its workers run as nobody: nothing
        // else in the directory needs to be reachable, so the key stays private.
        Ok(files)
    }
}
