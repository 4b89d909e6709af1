//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) for the kinds
//! kubectl's typed generators send that way (`kubectl create namespace|configmap|secret|
//! serviceaccount|service`). A table of field numbers per message turns the wire format into the
//! JSON the rest of the server stores. A field the table does not know is refused with
//! 415, never dropped: no silent data loss.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};

#[derive(Clone, Copy)]
enum Kind {
    Str,
    I64,
    Bool,
    Time,
    MapStr,
    MapBytes,
    /// `k8s.io.apimachinery.pkg.util.intstr.IntOrString`: a number or a string in JSON.
    IntOrString,
    Msg(&'static [Field]),
}

#[derive(Clone, Copy)]
struct Field {
    tag: u64,
    name: &'static str,
    kind: Kind,
    repeated: bool,
}

const fn f(tag: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        tag,
        name,
        kind,
        repeated: false,
    }
}

const fn r(tag: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        tag,
        name,
        kind,
        repeated: true,
    }
}

const OWNER_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
    f(5, "apiVersion", Kind::Str),
    f(6, "controller", Kind::Bool),
    f(7, "blockOwnerDeletion", Kind::Bool),
];

const OBJECT_META: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "generateName", Kind::Str),
    f(3, "namespace", Kind::Str),
    f(4, "selfLink", Kind::Str),
    f(5, "uid", Kind::Str),
    f(6, "resourceVersion", Kind::Str),
    f(7, "generation", Kind::I64),
    f(8, "creationTimestamp", Kind::Time),
    f(9, "deletionTimestamp", Kind::Time),
    f(10, "deletionGracePeriodSeconds", Kind::I64),
    f(11, "labels", Kind::MapStr),
    f(12, "annotations", Kind::MapStr),
    r(13, "ownerReferences", Kind::Msg(OWNER_REFERENCE)),
    r(14, "finalizers", Kind::Str),
];

const NAMESPACE_SPEC: &[Field] = &[r(1, "finalizers", Kind::Str)];
const NAMESPACE_STATUS: &[Field] = &[f(1, "phase", Kind::Str)];
const NAMESPACE: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(NAMESPACE_SPEC)),
    f(3, "status", Kind::Msg(NAMESPACE_STATUS)),
];
const CONFIG_MAP: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "data", Kind::MapStr),
    f(3, "binaryData", Kind::MapBytes),
    f(4, "immutable", Kind::Bool),
];
const SECRET: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "data", Kind::MapBytes),
    f(3, "type", Kind::Str),
    f(4, "stringData", Kind::MapStr),
    f(5, "immutable", Kind::Bool),
];
const OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(2, "namespace", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
    f(5, "apiVersion", Kind::Str),
    f(6, "resourceVersion", Kind::Str),
    f(7, "fieldPath", Kind::Str),
];
const LOCAL_OBJECT_REFERENCE: &[Field] = &[f(1, "name", Kind::Str)];
const SERVICE_ACCOUNT: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    r(2, "secrets", Kind::Msg(OBJECT_REFERENCE)),
    r(3, "imagePullSecrets", Kind::Msg(LOCAL_OBJECT_REFERENCE)),
    f(4, "automountServiceAccountToken", Kind::Bool),
];

const BOUND_OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(2, "apiVersion", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
];
const TOKEN_REQUEST_SPEC: &[Field] = &[
    r(1, "audiences", Kind::Str),
    f(3, "boundObjectRef", Kind::Msg(BOUND_OBJECT_REFERENCE)),
    f(4, "expirationSeconds", Kind::I64),
];
const TOKEN_REQUEST_STATUS: &[Field] = &[
    f(1, "token", Kind::Str),
    f(2, "expirationTimestamp", Kind::Time),
];
const TOKEN_REQUEST: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(TOKEN_REQUEST_SPEC)),
    f(3, "status", Kind::Msg(TOKEN_REQUEST_STATUS)),
];
const RESOURCE_ATTRIBUTES: &[Field] = &[
    f(1, "namespace", Kind::Str),
    f(2, "verb", Kind::Str),
    f(3, "group", Kind::Str),
    f(4, "version", Kind::Str),
    f(5, "resource", Kind::Str),
    f(6, "subresource", Kind::Str),
    f(7, "name", Kind::Str),
];
const NON_RESOURCE_ATTRIBUTES: &[Field] = &[f(1, "path", Kind::Str), f(2, "verb", Kind::Str)];
const ACCESS_REVIEW_SPEC: &[Field] = &[
    f(1, "resourceAttributes", Kind::Msg(RESOURCE_ATTRIBUTES)),
    f(
        2,
        "nonResourceAttributes",
        Kind::Msg(NON_RESOURCE_ATTRIBUTES),
    ),
    f(3, "user", Kind::Str),
    r(4, "groups", Kind::Str),
    f(6, "uid", Kind::Str),
];
const ACCESS_REVIEW_STATUS: &[Field] = &[
    f(1, "allowed", Kind::Bool),
    f(2, "reason", Kind::Str),
    f(3, "evaluationError", Kind::Str),
    f(4, "denied", Kind::Bool),
];
/// SubjectAccessReview and SelfSubjectAccessReview (whose spec has fields 1 and 2 only).
const ACCESS_REVIEW: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(ACCESS_REVIEW_SPEC)),
    f(3, "status", Kind::Msg(ACCESS_REVIEW_STATUS)),
];

const SERVICE_PORT: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "protocol", Kind::Str),
    f(3, "port", Kind::I64),
    f(4, "targetPort", Kind::IntOrString),
    f(5, "nodePort", Kind::I64),
    f(6, "appProtocol", Kind::Str),
];
const CLIENT_IP_CONFIG: &[Field] = &[f(1, "timeoutSeconds", Kind::I64)];
const SESSION_AFFINITY_CONFIG: &[Field] = &[f(1, "clientIP", Kind::Msg(CLIENT_IP_CONFIG))];
const SERVICE_SPEC: &[Field] = &[
    r(1, "ports", Kind::Msg(SERVICE_PORT)),
    f(2, "selector", Kind::MapStr),
    f(3, "clusterIP", Kind::Str),
    f(4, "type", Kind::Str),
    r(5, "externalIPs", Kind::Str),
    f(7, "sessionAffinity", Kind::Str),
    f(8, "loadBalancerIP", Kind::Str),
    r(9, "loadBalancerSourceRanges", Kind::Str),
    f(10, "externalName", Kind::Str),
    f(11, "externalTrafficPolicy", Kind::Str),
    f(12, "healthCheckNodePort", Kind::I64),
    f(13, "publishNotReadyAddresses", Kind::Bool),
    f(
        14,
        "sessionAffinityConfig",
        Kind::Msg(SESSION_AFFINITY_CONFIG),
    ),
    f(17, "ipFamilyPolicy", Kind::Str),
    r(18, "clusterIPs", Kind::Str),
    r(19, "ipFamilies", Kind::Str),
    f(20, "allocateLoadBalancerNodePorts", Kind::Bool),
    f(21, "loadBalancerClass", Kind::Str),
    f(22, "internalTrafficPolicy", Kind::Str),
    f(23, "trafficDistribution", Kind::Str),
];
const LOAD_BALANCER_INGRESS: &[Field] = &[f(1, "ip", Kind::Str), f(2, "hostname", Kind::Str)];
const LOAD_BALANCER_STATUS: &[Field] = &[r(1, "ingress", Kind::Msg(LOAD_BALANCER_INGRESS))];
const SERVICE_STATUS: &[Field] = &[f(1, "loadBalancer", Kind::Msg(LOAD_BALANCER_STATUS))];
const SERVICE: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(SERVICE_SPEC)),
    f(3, "status", Kind::Msg(SERVICE_STATUS)),
];

fn schema(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    match (api_version, kind) {
        ("v1", "Namespace") => Some(NAMESPACE),
        ("v1", "ConfigMap") => Some(CONFIG_MAP),
        ("v1", "Secret") => Some(SECRET),
        ("v1", "ServiceAccount") => Some(SERVICE_ACCOUNT),
        ("v1", "Service") => Some(SERVICE),
        ("authentication.k8s.io/v1", "TokenRequest") => Some(TOKEN_REQUEST),
        ("authorization.k8s.io/v1", "SubjectAccessReview" | "SelfSubjectAccessReview") => {
            Some(ACCESS_REVIEW)
        }
        _ => None,
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn malformed() -> ApiError {
    ApiError::bad_request("the protobuf request body is malformed")
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> ApiResult<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or_else(malformed)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed())
    }

    fn bytes(&mut self) -> ApiResult<&'a [u8]> {
        let n = usize::try_from(self.varint()?).map_err(|_| malformed())?;
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(malformed)?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }
}

fn utf8(b: &[u8]) -> ApiResult<String> {
    String::from_utf8(b.to_vec())
        .map_err(|_| ApiError::bad_request("a protobuf string field is not UTF-8"))
}

fn map_entry(b: &[u8], bytes_value: bool) -> ApiResult<(String, Value)> {
    let mut rd = Reader { buf: b, pos: 0 };
    let (mut k, mut v) = (String::new(), json!(""));
    while !rd.done() {
        let key = rd.varint()?;
        let data = rd.bytes()?;
        match key >> 3 {
            1 => k = utf8(data)?,
            2 if bytes_value => v = json!(base64::engine::general_purpose::STANDARD.encode(data)),
            2 => v = json!(utf8(data)?),
            _ => return Err(malformed()),
        }
    }
    Ok((k, v))
}

fn time(b: &[u8]) -> ApiResult<Value> {
    let mut rd = Reader { buf: b, pos: 0 };
    let mut secs = 0i64;
    while !rd.done() {
        let key = rd.varint()?;
        let v = rd.varint()?;
        if key >> 3 == 1 {
            secs = v as i64;
        }
    }
    if secs == 0 {
        return Ok(Value::Null);
    }
    let ts = jiff::Timestamp::from_second(secs).map_err(|_| malformed())?;
    Ok(json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn message(buf: &[u8], fields: &[Field], what: &str) -> ApiResult<Map<String, Value>> {
    let mut out = Map::new();
    let mut rd = Reader { buf, pos: 0 };
    while !rd.done() {
        let key = rd.varint()?;
        let (tag, wire) = (key >> 3, key & 7);
        let Some(field) = fields.iter().find(|fl| fl.tag == tag) else {
            return Err(ApiError::unsupported_media(
                "application/vnd.kubernetes.protobuf",
                &["application/json", "application/yaml (kubesim decodes protobuf only for the fields of Namespace, ConfigMap, Secret, ServiceAccount and Service it knows; field {tag} of {what} is not one)"],
            )
            .with_message(format!("kubesim cannot decode protobuf field {tag} of {what}: send this object as JSON or YAML (kubectl create -f / apply)")));
        };
        let value = match (field.kind, wire) {
            (Kind::I64, 0) => json!(rd.varint()? as i64),
            (Kind::Bool, 0) => json!(rd.varint()? != 0),
            (Kind::Str, 2) => json!(utf8(rd.bytes()?)?),
            (Kind::Time, 2) => time(rd.bytes()?)?,
            (Kind::Msg(sub), 2) => Value::Object(message(rd.bytes()?, sub, field.name)?),
            (Kind::IntOrString, 2) => int_or_string(rd.bytes()?)?,
            (Kind::MapStr, 2) | (Kind::MapBytes, 2) => {
                let (k, v) = map_entry(rd.bytes()?, matches!(field.kind, Kind::MapBytes))?;
                let m = out
                    .entry(field.name)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(m) = m.as_object_mut() {
                    m.insert(k, v);
                }
                continue;
            }
            _ => return Err(malformed()),
        };
        if field.repeated {
            if let Some(a) = out
                .entry(field.name)
                .or_insert_with(|| json!([]))
                .as_array_mut()
            {
                a.push(value);
            }
            continue;
        }
        // proto2 optional fields arrive set to their zero value; JSON omits them
        let empty = match &value {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Number(n) => n.as_i64() == Some(0),
            Value::Object(m) => m.is_empty() && field.name != "spec" && field.name != "metadata",
            _ => false,
        };
        if !empty {
            out.insert(field.name.to_string(), value);
        }
    }
    Ok(out)
}

/// An `IntOrString` message (type 0: `intVal`, type 1: `strVal`) as JSON.
fn int_or_string(buf: &[u8]) -> ApiResult<Value> {
    let (mut is_str, mut int, mut text) = (false, 0i64, String::new());
    let mut rd = Reader { buf, pos: 0 };
    while !rd.done() {
        let key = rd.varint()?;
        match (key >> 3, key & 7) {
            (1, 0) => is_str = rd.varint()? == 1,
            (2, 0) => int = rd.varint()? as i32 as i64,
            (3, 2) => text = utf8(rd.bytes()?)?,
            _ => return Err(malformed()),
        }
    }
    Ok(if is_str { json!(text) } else { json!(int) })
}

/// Decodes a `k8s\0` protobuf envelope into the object's JSON.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| ApiError::bad_request("a protobuf body must start with the k8s\\0 magic"))?;
    let mut rd = Reader { buf: rest, pos: 0 };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while !rd.done() {
        let key = rd.varint()?;
        let data = rd.bytes()?;
        match key >> 3 {
            1 => {
                let mut tm = Reader { buf: data, pos: 0 };
                while !tm.done() {
                    let k = tm.varint()?;
                    let v = utf8(tm.bytes()?)?;
                    match k >> 3 {
                        1 => api_version = v,
                        2 => kind = v,
                        _ => {}
                    }
                }
            }
            2 => raw = data,
            _ => {}
        }
    }
    let Some(fields) = schema(&api_version, &kind) else {
        return Err(ApiError::unsupported_media("application/vnd.kubernetes.protobuf", &["application/json", "application/yaml"])
            .with_message(format!("kubesim decodes protobuf bodies only for v1 Namespace, ConfigMap, Secret, ServiceAccount and Service, not {api_version} {kind}: send it as JSON or YAML (kubectl create -f / apply)")));
    };
    let mut obj = message(raw, fields, &kind)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

impl ApiError {
    /// The same error with another message.
    pub fn with_message(mut self, message: String) -> Self {
        self.message = message;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_or_string_is_a_number_or_a_string() {
        // intVal 8080 (type 0 omitted), and strVal "https" with type 1
        assert_eq!(int_or_string(&[0x10, 0x90, 0x3f]).unwrap(), json!(8080));
        let mut named = vec![0x08, 0x01, 0x1a, 5];
        named.extend(b"https");
        assert_eq!(int_or_string(&named).unwrap(), json!("https"));
        assert_eq!(int_or_string(&[0x20, 0x01]).unwrap_err().code, 400);
    }

    #[test]
    fn decodes_what_kubectl_create_namespace_sends() {
        // captured from `kubectl create namespace tmp1 -v=9` (kubectl v1.37)
        let body: &[u8] = &[
            0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x4e, 0x61,
            0x6d, 0x65, 0x73, 0x70, 0x61, 0x63, 0x65, 0x12, 0x1c, 0x0a, 0x14, 0x0a, 0x04, 0x74,
            0x6d, 0x70, 0x31, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38,
            0x00, 0x42, 0x00, 0x12, 0x00, 0x1a, 0x02, 0x0a, 0x00, 0x1a, 0x00, 0x22, 0x00,
        ];
        let v = decode(body).unwrap();
        assert_eq!(v["kind"], "Namespace");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["metadata"], json!({"name": "tmp1"}));
    }

    fn enc_str(tag: u64, s: &[u8]) -> Vec<u8> {
        let mut v = vec![(tag << 3 | 2) as u8, s.len() as u8];
        v.extend_from_slice(s);
        v
    }

    #[test]
    fn configmap_maps_and_unknown_fields() {
        let mut entry = enc_str(1, b"k");
        entry.extend(enc_str(2, b"v"));
        let mut meta = enc_str(1, b"cm");
        meta.extend(enc_str(3, b"default"));
        let mut cm = enc_str(1, &meta);
        cm.extend(enc_str(2, &entry));
        let mut tm = enc_str(1, b"v1");
        tm.extend(enc_str(2, b"ConfigMap"));
        let mut body = b"k8s\0".to_vec();
        body.extend(enc_str(1, &tm));
        body.extend(enc_str(2, &cm));
        let v = decode(&body).unwrap();
        assert_eq!(v["data"], json!({"k": "v"}));
        assert_eq!(v["metadata"]["namespace"], "default");
        // a field the table does not know is refused, not dropped
        let mut bad = cm.clone();
        bad.extend(enc_str(9, b"x"));
        let mut body = b"k8s\0".to_vec();
        body.extend(enc_str(1, &tm));
        body.extend(enc_str(2, &bad));
        assert_eq!(decode(&body).unwrap_err().code, 415);
        assert_eq!(decode(b"nope").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\x0a\xff").unwrap_err().code, 400);
    }
}
