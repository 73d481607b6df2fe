//! Bearer tokens bound to tenants.
//!
//! Tokens are configured as the SHA-256 of the token (so the config file holds no
//! secret) and compared in constant time against every configured hash. With no
//! tokens configured the gateway is open, and then listens on loopback only unless
//! told otherwise (see `serve`).

use axum::http::{header, HeaderMap};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::settings::TokenEntry;

/// The configured tokens.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    tokens: Vec<TokenEntry>,
}

/// Who makes a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The tenant bound to the caller's token; `None` when auth is off.
    pub tenant: Option<String>,
    /// Whether the caller may reload the config.
    pub admin: bool,
}

// === impl Auth ===

impl Auth {
    /// Auth with these tokens (none: open).
    pub fn new(tokens: Vec<TokenEntry>) -> Self {
        Self { tokens }
    }

    /// Whether any token is configured.
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Identifies the caller from its `Authorization: Bearer` header.
    ///
    /// # Errors
    ///
    /// [`ApiError::Unauthorized`] when auth is on and the token is missing or unknown.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        if !self.enabled() {
            return Ok(Caller {
                tenant: None,
                admin: true,
            });
        }
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Err(ApiError::Unauthorized(
                "missing bearer token: send Authorization: Bearer <token>",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or(ApiError::Unauthorized(
                "malformed Authorization header: expected Bearer <token>",
            ))?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for t in &self.tokens {
            // Every hash is compared, so timing does not tell which one matched.
            if bool::from(t.sha256.ct_eq(&digest)) {
                found = Some(t);
            }
        }
        found
            .map(|t| Caller {
                tenant: Some(t.tenant.clone()),
                admin: t.admin,
            })
            .ok_or(ApiError::Unauthorized("unknown bearer token"))
    }
}

// === impl Caller ===

impl Caller {
    /// The tenant a call is made for: the token's tenant; a tenant named in the
    /// request must be the same. Without auth, the tenant named in the request.
    ///
    /// # Errors
    ///
    /// [`ApiError::Forbidden`] when the request names another tenant.
    pub fn tenant_for(&self, requested: Option<String>) -> Result<Option<String>, ApiError> {
        match (&self.tenant, requested) {
            (None, r) => Ok(r),
            (Some(mine), Some(r)) if *mine != r => Err(ApiError::Forbidden(format!(
                "this token is bound to tenant {mine:?} and cannot act for tenant {r:?}"
            ))),
            (Some(mine), _) => Ok(Some(mine.clone())),
        }
    }

    /// The tenant whose figures a read shows: as [`Caller::tenant_for`], except that
    /// an admin token may name any tenant (its own by default).
    ///
    /// # Errors
    ///
    /// As [`Caller::tenant_for`], for a token without the admin right.
    pub fn tenant_to_read(&self, requested: Option<String>) -> Result<Option<String>, ApiError> {
        match (&self.tenant, requested) {
            (Some(_), Some(r)) if self.admin => Ok(Some(r)),
            (_, r) => self.tenant_for(r),
        }
    }

    /// Requires the admin right.
    ///
    /// # Errors
    ///
    /// [`ApiError::Forbidden`] for a token without `admin = true`.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.admin {
            Ok(())
        } else {
            Err(ApiError::Forbidden(
                "this token may not reload the config (it needs admin = true)".into(),
            ))
        }
    }
}

/// SHA-256 of a token, hex encoded, as `[[gateway.tokens]] sha256` expects.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn auth() -> Auth {
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(hash_token("s3cret"), &mut sha256).expect("hex");
        Auth::new(vec![TokenEntry {
            tenant: "acme".into(),
            sha256,
            admin: false,
        }])
    }

    fn with(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn a_token_maps_to_its_tenant_and_others_are_refused() {
        let a = auth();
        let c = a.authenticate(&with("Bearer s3cret")).expect("known");
        assert_eq!(c.tenant.as_deref(), Some("acme"));
        assert!(a.authenticate(&with("Bearer nope")).is_err());
        assert!(a.authenticate(&HeaderMap::new()).is_err());
        assert!(c.tenant_for(Some("other".into())).is_err());
        assert_eq!(c.tenant_for(None).expect("own").as_deref(), Some("acme"));
        assert!(c.require_admin().is_err());
    }
}
