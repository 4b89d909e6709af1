//! What the verbs know of a request: query parameters, the representation asked for,
//! the body and who sent it (the field manager), and the warnings to answer with.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// Parsed request facts the verbs need.
pub struct Req {
    /// Query parameters.
    pub query: HashMap<String, String>,
    /// Wants a Table, its rows carrying what `includeObject` says.
    pub table: Option<causeway_runtime::table::IncludeObject>,
    /// Wants PartialObjectMetadata(List) (metadata-only clients).
    pub metadata_only: bool,
    /// Content-Type (without parameters).
    pub content_type: String,
    /// Body bytes (empty for GET/DELETE without body).
    pub body: Bytes,
    /// User-Agent.
    pub user_agent: String,
    /// Who sent it (after impersonation).
    pub user: crate::http::auth::User,
    /// Warnings to return as `Warning:` headers.
    pub warnings: Vec<String>,
    /// The body as decoded by the HTTP layer, for a content type the verbs do not read
    /// themselves (protobuf); [`Req::decode`] answers with it instead of parsing `body`.
    pub decoded: Option<ApiResult<Value>>,
    /// For a PATCH that validating webhooks admitted: the resourceVersion of the object
    /// they were shown (`Some(None)`: an apply that created). The PATCH runs only on
    /// that version, as kube-apiserver admits the object it writes; another is a 409.
    pub admitted: Option<Option<String>>,
}

impl Req {
    /// A query parameter.
    pub fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }

    /// True for `?k=true` / `?k=1`.
    pub fn flag(&self, k: &str) -> bool {
        matches!(self.q(k), Some("true") | Some("1"))
    }

    /// The field manager: `fieldManager`, else the user agent's program name.
    pub fn manager(&self) -> String {
        match self.q("fieldManager") {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => self
                .user_agent
                .split('/')
                .next()
                .unwrap_or("unknown")
                .to_string(),
        }
    }

    /// Decodes the body as JSON or YAML.
    pub fn decode(&self) -> ApiResult<Value> {
        if self.body.is_empty() {
            return Err(ApiError::bad_request(
                "the request body is empty: send the object as JSON or YAML",
            ));
        }
        // No Content-Type means JSON, as kube-apiserver's serializer negotiation does.
        let yaml = match self.content_type.as_str() {
            "" | "application/json" => false,
            "application/yaml" | "application/apply-patch+yaml" => true,
            other => {
                if let Some(decoded) = &self.decoded {
                    return decoded.clone();
                }
                return Err(ApiError::unsupported_media(
                    other,
                    &["application/json", "application/yaml"],
                ));
            }
        };
        let text = std::str::from_utf8(&self.body)
            .map_err(|_| ApiError::bad_request("the request body is not UTF-8"))?;
        let v: Value = if yaml {
            serde_saphyr::from_str(text)
                .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}")))?
        } else {
            serde_json::from_str(text).map_err(|e| {
                ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
            })?
        };
        Ok(v)
    }
}
