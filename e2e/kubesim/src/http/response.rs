//! Response bodies: whole JSON bodies and `metav1.Status` errors.

use bytes::Bytes;
use http::{Response, header};

use crate::error::ApiError;

/// Response body type.
pub use causeway_runtime::https::Body;

/// A full body.
pub use causeway_runtime::https::full;

/// A JSON response.
pub fn json_response(code: u16, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body))
        .expect("valid response")
}

/// A Status error response.
pub fn error_response(e: &ApiError) -> Response<Body> {
    json_response(
        e.code,
        serde_json::to_vec(&e.to_status()).unwrap_or_default(),
    )
}
