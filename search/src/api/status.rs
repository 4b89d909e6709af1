//! Responses: JSON bodies and the metav1 Status errors kubectl prints as
//! `Error from server (Reason): message`.

use http::{Response, StatusCode, header};
use serde_json::{Value, json};

/// A response: whole, or streamed (a watch).
pub type Reply = Response<causeway_runtime::https::Body>;

/// A 200 with a JSON body.
pub fn json_ok(v: &Value) -> Reply {
    json_reply(StatusCode::OK, v)
}

/// A JSON reply with `status`.
pub fn json_reply(status: StatusCode, v: &Value) -> Reply {
    let mut r = Response::new(causeway_runtime::https::full(
        serde_json::to_vec(v).unwrap_or_default(),
    ));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// A failure Status with kube-apiserver's reason for the code.
pub fn failure(status: StatusCode, message: impl Into<String>) -> Reply {
    json_reply(status, &status_object(status, message))
}

/// What a 503 tells the client when the store cannot answer: no more (the store's own
/// error names hosts, databases and users; it goes to the log instead).
pub const STORE_UNAVAILABLE: &str =
    "the search store is not answering: try again later (the search server's log says why)";

/// The 503 of a store that cannot answer; `error` goes to the log, not to the client.
pub fn store_unavailable(error: &dyn std::fmt::Display) -> Reply {
    tracing::warn!(error = %error, "search store unavailable; answered 503");
    failure(StatusCode::SERVICE_UNAVAILABLE, STORE_UNAVAILABLE)
}

/// The metav1 Status of a failure (also a watch's ERROR event object).
pub fn status_object(status: StatusCode, message: impl Into<String>) -> Value {
    let reason = match status {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::UNAUTHORIZED => "Unauthorized",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::CONFLICT => "Conflict",
        StatusCode::GONE => "Expired",
        StatusCode::UNPROCESSABLE_ENTITY => "Invalid",
        StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
        _ => "InternalError",
    };
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message.into(),
        "reason": reason,
        "code": status.as_u16(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn failures_are_status_objects_with_the_reason_of_their_code() {
        let cases = [
            (StatusCode::BAD_REQUEST, "BadRequest"),
            (StatusCode::UNAUTHORIZED, "Unauthorized"),
            (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
            (StatusCode::CONFLICT, "Conflict"),
            (StatusCode::GONE, "Expired"),
            (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        ];
        for (code, reason) in cases {
            let r = failure(code, "what went wrong");
            assert_eq!(r.status(), code);
            let body = r.into_body().collect().await.unwrap().to_bytes();
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["kind"], "Status");
            assert_eq!(v["reason"], reason);
            assert_eq!(v["code"], code.as_u16());
            assert_eq!(v["message"], "what went wrong");
        }
    }
}
