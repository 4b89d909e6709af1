//! TokenRequest (`POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`, what
//! `kubectl create token` sends): short-lived ServiceAccount tokens as kube-apiserver's
//! bound tokens are. Each is a JWT (HS256 with a key per server run) naming the
//! ServiceAccount and its uid; authentication accepts it as
//! `system:serviceaccount:<ns>:<name>` until it expires, while that very ServiceAccount
//! exists, and only when it was issued for the API server's audience.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bytes::Bytes;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ApiResult, invalid_field};
use crate::http::auth::User;
use crate::http::context::Inner;
use crate::state::registry::gr;
use crate::state::stored::meta_str;
use crate::verbs::request::Req;

/// The audience of tokens for the API server itself (kube-apiserver's default `--api-audiences`).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 600;
const MAX_EXPIRATION: i64 = 1 << 32;

/// A fresh signing key.
pub fn new_key() -> [u8; 32] {
    let mut k = [0u8; 32];
    k[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    k[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    k
}

/// HMAC-SHA256 (RFC 2104) with a key of at most 64 bytes.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    k[..key.len().min(64)].copy_from_slice(&key[..key.len().min(64)]);
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn now(inner: &Inner) -> i64 {
    jiff::Timestamp::now().as_second() + inner.faults.clock_ahead().as_secs() as i64
}

fn sign(key: &[u8], claims: &Value) -> String {
    let head = B64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let body = B64.encode(serde_json::to_vec(claims).unwrap_or_default());
    let signed = format!("{head}.{body}");
    let sig = B64.encode(hmac_sha256(key, signed.as_bytes()));
    format!("{signed}.{sig}")
}

/// The claims of a token this server signed, or None.
fn verify(key: &[u8], token: &str) -> Option<Value> {
    let (signed, sig) = token.rsplit_once('.')?;
    let (_, body) = signed.split_once('.')?;
    let want = hmac_sha256(key, signed.as_bytes());
    let got = B64.decode(sig).ok()?;
    // constant time: every byte is compared
    let same =
        got.len() == want.len() && got.iter().zip(want).fold(0, |d, (a, b)| d | (a ^ b)) == 0;
    if !same {
        return None;
    }
    serde_json::from_slice(&B64.decode(body).ok()?).ok()
}

/// The ServiceAccount a requested token stands for, if it is valid now.
pub fn authenticate(inner: &Inner, token: &str) -> Option<User> {
    let claims = verify(&inner.sa_key, token)?;
    if claims["exp"].as_i64()? <= now(inner) {
        return None;
    }
    if !claims["aud"]
        .as_array()?
        .iter()
        .any(|a| a.as_str() == Some(API_AUDIENCE))
    {
        return None;
    }
    let k = &claims["kubernetes.io"];
    let ns = k["namespace"].as_str()?;
    let name = k.pointer("/serviceaccount/name")?.as_str()?;
    let uid = k.pointer("/serviceaccount/uid")?.as_str()?;
    let st = inner.state.lock();
    let sa = st.store.get(&gr("", "serviceaccounts"), ns, name)?;
    if meta_str(&sa.value, "uid") != uid {
        return None;
    }
    Some(User {
        name: format!("system:serviceaccount:{ns}:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into(),
        ],
        uid: uid.to_string(),
        ..Default::default()
    })
}

/// POST `.../serviceaccounts/{name}/token`: 201 with the TokenRequest and its status.
pub fn create(inner: &Inner, ns: &str, name: &str, r: &Req) -> ApiResult<(u16, Bytes)> {
    let body = r.decode()?;
    let (av, kind) = (
        body.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
        body.get("kind").and_then(Value::as_str).unwrap_or(""),
    );
    if kind != "TokenRequest" || !matches!(av, "" | "authentication.k8s.io/v1") {
        return Err(ApiError::bad_request(format!(
            "the body of serviceaccounts/token must be an authentication.k8s.io/v1 TokenRequest, not {av} {kind}"
        )));
    }
    let body_name = meta_str(&body, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the TokenRequest ({body_name}) does not match the ServiceAccount on the URL ({name})"
        )));
    }
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "spec.expirationSeconds must be an integer, got {v}"
            ))
        })?,
    };
    let too = if seconds < MIN_EXPIRATION {
        Some("may not specify a duration less than 10 minutes")
    } else if seconds > MAX_EXPIRATION {
        Some("may not specify a duration larger than 2^32 seconds")
    } else {
        None
    };
    if let Some(why) = too {
        return Err(ApiError::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            "",
            vec![invalid_field(
                "spec.expirationSeconds",
                format!("Invalid value: {seconds}: {why}"),
            )],
        ));
    }
    let audiences: Vec<String> = match spec.get("audiences").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        _ => vec![API_AUDIENCE.to_string()],
    };
    let uid = {
        let st = inner.state.lock();
        let sa = st
            .store
            .get(&gr("", "serviceaccounts"), ns, name)
            .ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
        meta_str(&sa.value, "uid").to_string()
    };
    let iat = now(inner);
    let exp = iat + seconds;
    let claims = json!({
        "aud": audiences, "exp": exp, "iat": iat, "nbf": iat,
        "iss": API_AUDIENCE,
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "jti": crate::state::meta::new_uid(),
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": uid}},
    });
    let token = sign(&inner.sa_key, &claims);
    let expires = jiff::Timestamp::from_second(exp)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let out = json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": crate::state::meta::now_rfc3339()},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null)},
        "status": {"token": token, "expirationTimestamp": expires},
    });
    Ok((
        201,
        Bytes::from(serde_json::to_vec(&out).unwrap_or_default()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn signatures_verify_only_with_the_key_and_untouched() {
        let k = new_key();
        let t = sign(&k, &json!({"sub": "x"}));
        assert_eq!(verify(&k, &t).unwrap()["sub"], "x");
        assert!(verify(&new_key(), &t).is_none());
        let tampered = t.replacen('.', ".e30", 1);
        assert!(verify(&k, &tampered).is_none());
        assert!(verify(&k, "not a token").is_none());
    }
}
