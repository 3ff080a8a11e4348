//! Certificates made in the test (rcgen), written as PEM files to a fresh
//! directory: a CA, a server certificate it signed for `localhost` and `127.0.0.1`, and the
//! broken kinds a server must refuse at startup.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// A directory of PEM files.
pub struct Certs {
    /// The directory, removed when dropped.
    pub dir: PathBuf,
    /// The CA's certificate (what clients trust).
    pub ca: PathBuf,
    /// The server's certificate then the CA's (a chain).
    pub cert: PathBuf,
    /// The server's key.
    pub key: PathBuf,
    ca_issuer: CertifiedIssuer<'static, KeyPair>,
}

fn ca() -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "berth test CA");
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

impl Certs {
    /// A CA and a server certificate for `localhost` and `127.0.0.1`, in `tag`'s directory.
    pub fn new(tag: &str) -> Certs {
        let dir = std::env::temp_dir().join(format!("berth-certs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca_issuer = ca();
        let certs = Certs {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            dir,
            ca_issuer,
        };
        std::fs::write(&certs.ca, certs.ca_issuer.as_ref().pem()).unwrap();
        certs.issue("server", &certs.cert.clone(), &certs.key.clone(), None);
        certs
    }

    /// Signs a new server certificate with common name `cn` into `cert` (with the CA after it)
    /// and `key`; `expired`: valid only in the year 2000.
    pub fn issue(&self, cn: &str, cert: &Path, key: &Path, valid: Option<(i32, i32)>) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        if let Some((from, to)) = valid {
            params.not_before = rcgen::date_time_ymd(from, 1, 1);
            params.not_after = rcgen::date_time_ymd(to, 1, 1);
        }
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = params.signed_by(&leaf_key, &self.ca_issuer).unwrap();
        std::fs::write(
            cert,
            format!("{}{}", leaf.pem(), self.ca_issuer.as_ref().pem()),
        )
        .unwrap();
        std::fs::write(key, leaf_key.serialize_pem()).unwrap();
    }

    /// A path in this directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
