//! Request extractors with JSON errors: [`JsonBody`] (any content type, clear
//! messages for malformed JSON, wrong types and oversized bodies) and [`Caller`].

use std::pin::Pin;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// A JSON request body. Unlike `axum::Json` it does not insist on a content type (so
/// `curl -d` works), and every rejection is a JSON error naming the problem.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

// === impl JsonBody ===

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = read_body(req.into_body(), state.body_limit()).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// Reads a whole body of at most `limit` bytes. Reading frames directly (rather than
/// `Bytes::from_request`, which boxes a `Limited` body and collects into a list) keeps
/// the usual one-frame body as it came, without an allocation.
async fn read_body(mut body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::BodyTooLarge(limit);
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large());
    }
    let mut first: Option<Bytes> = None;
    let mut more: Vec<u8> = Vec::new();
    let mut len = 0usize;
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame
            .map_err(|e| ApiError::InvalidRequest(format!("cannot read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        len = len.saturating_add(data.len());
        if len > limit {
            return Err(too_large());
        }
        match first.take() {
            None if more.is_empty() => first = Some(data),
            Some(f) => {
                more.extend_from_slice(&f);
                more.extend_from_slice(&data);
            }
            None => more.extend_from_slice(&data),
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(more)))
}

/// Parses a JSON body, telling syntax errors apart from wrong shapes.
///
/// # Errors
///
/// [`ApiError::MalformedJson`] or [`ApiError::InvalidRequest`], naming the problem.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::MalformedJson(
            "the request body is empty; expected a JSON object".into(),
        ));
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        let v: serde_json::Value = serde_json::from_slice(bytes).map_err(malformed)?;
        return Err(ApiError::InvalidRequest(format!(
            "the request body must be a JSON object, got {}",
            kind(&v)
        )));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Syntax | Category::Eof | Category::Io => malformed(e),
            Category::Data => ApiError::InvalidRequest(format!("invalid request: {e}")),
        }
    })
}

fn malformed(e: serde_json::Error) -> ApiError {
    ApiError::MalformedJson(format!("the request body is not valid JSON: {e}"))
}

fn kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value::*;
    match v {
        Null => "null",
        Bool(_) => "a boolean",
        Number(_) => "a number",
        String(_) => "a string",
        Array(_) => "an array",
        Object(_) => "an object",
    }
}

// === impl Caller ===

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state.live().auth.authenticate(&parts.headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct T {
        #[allow(dead_code)]
        n: u64,
    }

    #[test]
    fn syntax_errors_and_wrong_types_are_told_apart() {
        assert!(matches!(
            parse::<T>(b"{\"n\": "),
            Err(ApiError::MalformedJson(_))
        ));
        assert!(matches!(parse::<T>(b"  "), Err(ApiError::MalformedJson(_))));
        match parse::<T>(b"{\"n\": -1}") {
            Err(ApiError::InvalidRequest(m)) => {
                assert!(m.contains("invalid value: integer `-1`"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
}
