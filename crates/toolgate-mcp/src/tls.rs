//! TLS to `https://` upstreams: rmcp's reqwest 0.13 client with rustls, whose crypto
//! provider is rustls's `ring` (installed as the process default once, as reqwest is
//! built without a provider of its own), and whose roots are either the system's
//! (rustls-platform-verifier: the platform's store, `SSL_CERT_FILE` on Linux) or,
//! for a server with `ca_file`, exactly the certificates of that file.
//!
//! Why toolgate builds the client instead of taking rmcp's default one: a server's
//! own CA can only be given to a client built here. The client is otherwise rmcp's
//! default: no idle connections kept, and only same-origin 307/308 redirects followed
//! (they keep a POST's body; another origin would be sent the session id and the
//! configured headers).

use std::io::Read;

use reqwest_mcp::redirect::{Attempt, Policy};
use reqwest_mcp::{Certificate, StatusCode};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// The largest `ca_file` read (a bundle of every public root is about 220 KiB).
pub const MAX_CA_FILE_BYTES: u64 = 1024 * 1024;
/// The most redirects followed for one request (as rmcp's default client).
const MAX_REDIRECTS: usize = 10;

/// The CA certificates of one server's `ca_file`, read and checked when the config
/// is read: the only roots its certificate is verified against.
#[derive(Clone, PartialEq, Eq)]
pub struct CaFile {
    path: String,
    certs: Vec<CertificateDer<'static>>,
}

// === impl CaFile ===

impl CaFile {
    /// Reads the PEM certificates of `path` (relative to the working directory).
    ///
    /// # Errors
    ///
    /// When the file cannot be read, is larger than [`MAX_CA_FILE_BYTES`], holds no
    /// PEM certificate, or a certificate in it cannot be a trust anchor; the
    /// message starts with the path.
    pub fn read(path: &str) -> Result<Self, String> {
        let fail = |what: String| format!("{path:?}: {what}");
        let mut pem = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CA_FILE_BYTES + 1).read_to_end(&mut pem))
            .map_err(|e| fail(format!("cannot read it: {e}")))?;
        if pem.len() as u64 > MAX_CA_FILE_BYTES {
            return Err(fail(format!(
                "larger than {MAX_CA_FILE_BYTES} bytes (expected PEM CA certificates)"
            )));
        }
        let certs = Self::parse(&pem).map_err(fail)?;
        Ok(Self {
            path: path.to_string(),
            certs,
        })
    }

    /// The path as configured.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How many certificates it holds.
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// Whether it holds none (never, once read).
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    fn parse(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("not PEM: {e}"))?;
        if certs.is_empty() {
            return Err("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into());
        }
        let mut store = RootCertStore::empty();
        for (i, der) in certs.iter().enumerate() {
            store
                .add(der.clone())
                .map_err(|e| format!("certificate {}: not a usable CA: {e}", i + 1))?;
        }
        Ok(certs)
    }
}

impl std::fmt::Debug for CaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("certificates", &self.certs.len())
            .finish()
    }
}

/// The HTTP client of one Streamable HTTP upstream: the system's roots, or only
/// those of `ca`.
///
/// # Errors
///
/// When the TLS setup fails (the system's roots cannot be loaded, say).
pub(crate) fn http_client(ca: Option<&CaFile>) -> Result<reqwest_mcp::Client, String> {
    install_provider();
    let mut builder = reqwest_mcp::Client::builder()
        // rmcp's default: an idle connection reused after an unread body stalls.
        .pool_max_idle_per_host(0)
        .redirect(Policy::custom(same_origin));
    if let Some(ca) = ca {
        let certs = ca.certs.iter().map(|der| Certificate::from_der(der));
        let certs = certs
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("ca_file {:?}: {}", ca.path, chain(&e)))?;
        builder = builder.tls_certs_only(certs);
    }
    builder
        .build()
        .map_err(|e| format!("cannot set up the HTTP client: {}", chain(&e)))
}

/// Installs rustls's `ring` provider as the process default, unless one is. rmcp's
/// HTTP client is built without a provider of its own: a program that builds rmcp
/// clients itself (besides toolgate's upstream links, which call this) must call it
/// first, or reqwest panics.
pub fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Follows a redirect only when it keeps the request (307, 308) and its origin.
fn same_origin(attempt: Attempt<'_>) -> reqwest_mcp::redirect::Action {
    let keeps_body = matches!(
        attempt.status(),
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
    );
    let same_origin = attempt
        .previous()
        .first()
        .is_some_and(|first| first.origin() == attempt.url().origin());
    if !keeps_body || !same_origin {
        attempt.stop()
    } else if attempt.previous().len() > MAX_REDIRECTS {
        attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
    } else {
        attempt.follow()
    }
}

/// An error and its causes, `: `-separated (reqwest's message alone does not say
/// why a request failed, such as which certificate check).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, bytes: &[u8]) -> String {
        let dir = std::env::temp_dir().join(format!("toolgate-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let e = CaFile::read("/nonexistent/ca.pem").expect_err("missing");
        assert!(
            e.starts_with("\"/nonexistent/ca.pem\": cannot read it: "),
            "{e}"
        );
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let p = write("empty.pem", b"# nothing here\n");
        let e = CaFile::read(&p).expect_err("empty");
        assert_eq!(
            e,
            format!("{p:?}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it")
        );
    }

    #[test]
    fn a_certificate_that_is_not_der_is_refused() {
        // Valid base64, but not a certificate.
        let p = write(
            "junk.pem",
            b"-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
        );
        let e = CaFile::read(&p).expect_err("junk");
        assert!(
            e.starts_with(&format!("{p:?}: certificate 1: not a usable CA: ")),
            "{e}"
        );
    }

    #[test]
    fn a_file_over_the_bound_is_refused_unread() {
        let big = vec![b'#'; usize::try_from(MAX_CA_FILE_BYTES).expect("fits") + 1];
        let p = write("big.pem", &big);
        let e = CaFile::read(&p).expect_err("big");
        assert!(e.contains("larger than 1048576 bytes"), "{e}");
    }

    #[test]
    fn the_client_builds_with_the_system_roots() {
        let client = http_client(None);
        assert!(client.is_ok(), "{:?}", client.err());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
