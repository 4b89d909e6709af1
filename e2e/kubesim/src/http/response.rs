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

/// A Status error response, with the warnings recorded before it.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(
        e.code,
        serde_json::to_vec(&e.to_status()).unwrap_or_default(),
    );
    add_warnings(&mut resp, &e.warnings);
    resp
}

/// Adds `warnings` as kube-apiserver's `Warning` headers: `299 - "<text>"`, the text's
/// `"` and `\` escaped with a backslash, each text once, UTF-8 kept.
pub fn add_warnings(resp: &mut Response<Body>, warnings: &[String]) {
    let mut seen = std::collections::BTreeSet::new();
    for w in warnings.iter().filter(|w| seen.insert(w.as_str())) {
        let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = http::HeaderValue::from_bytes(format!("299 - \"{quoted}\"").as_bytes()) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
}
