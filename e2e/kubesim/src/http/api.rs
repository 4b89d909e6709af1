//! Request handling: authentication and authorization, content types, request
//! metrics, and the dispatch to discovery, TokenRequest, watches and the verbs.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::error::{ApiError, ApiResult};
use crate::http::auth::{Attributes, User, authorize};
use crate::http::context::Inner;
use crate::http::metrics::RequestLabels;
use crate::http::path::{ResPath, parse_res_path};
use crate::http::response::{Body, error_response, full, json_response};
use crate::state::registry::ResourceType;
use crate::verbs::request::Req;

/// kube-apiserver's `ValidateDryRun` of a write's options: `All` is the only `dryRun`
/// there is; anything else is a 422 naming the options kind. A DELETE with a body takes
/// its options (and `dryRun`) from the body, as kube-apiserver's delete handler does.
fn validate_dry_run(method: &Method, body: &[u8], query: Vec<String>) -> ApiResult<()> {
    let kind = match *method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        Method::PATCH => "PatchOptions",
        Method::DELETE => "DeleteOptions",
        _ => return Ok(()),
    };
    let values = if *method == Method::DELETE && !body.is_empty() {
        serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|b| b.get("dryRun").and_then(|d| d.as_array()).cloned())
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), String::from))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        query
    };
    if values.iter().all(|v| v == "All") {
        return Ok(());
    }
    // printed as Go prints a []string with %#v
    let listed = values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Err(ApiError::invalid(
        kind,
        "meta.k8s.io",
        "",
        vec![crate::error::Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: []string{{{listed}}}: supported values: \"All\""),
            field: "dryRun".into(),
        }],
    ))
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

/// The user a bearer token stands for: a static token, else a TokenRequest token.
pub(crate) fn token_user(inner: &Inner, t: &str) -> Option<User> {
    let fixed = inner
        .tokens
        .read()
        .iter()
        .find(|(tok, _)| tok == t)
        .map(|(_, u)| u.clone());
    fixed.or_else(|| crate::http::tokens::authenticate(inner, t))
}

fn authenticate(inner: &Inner, headers: &HeaderMap, cert_user: Option<User>) -> Option<User> {
    if let Some(t) = bearer(headers) {
        return token_user(inner, t);
    }
    if let Some(u) = cert_user {
        return Some(u);
    }
    inner.cfg.allow_anonymous.then(User::anonymous)
}

fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
    ) || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}

/// The hyper service function.
pub async fn handle(
    inner: Arc<Inner>,
    req: Request<Incoming>,
    cert_user: Option<User>,
) -> Result<Response<Body>, std::io::Error> {
    if inner.faults.dropping() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "kubesim: dropping connections",
        ));
    }
    let latency = inner.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let resp = match route(&inner, req, cert_user).await {
        Ok(r) => r,
        Err((e, labels)) => {
            if let Some(mut l) = labels {
                l.code = e.code;
                inner.metrics.requests.get_or_create(&l).inc();
            }
            tracing::debug!(%method, %path, code = e.code, reason = e.reason, message = %e.message, "request failed");
            error_response(&e)
        }
    };
    Ok(resp)
}

type RouteResult = Result<Response<Body>, (ApiError, Option<RequestLabels>)>;

async fn route(inner: &Arc<Inner>, req: Request<Incoming>, cert_user: Option<User>) -> RouteResult {
    let path = req.uri().path().to_string();
    if is_public(&path) {
        return Ok(crate::http::discovery::health(inner, &path));
    }
    let Some(user) = authenticate(inner, req.headers(), cert_user) else {
        return Err((ApiError::unauthorized(), None));
    };
    // the state is locked only for a request that asks to act as someone
    let user = match crate::http::impersonate::requested(req.headers()).map_err(|e| (e, None))? {
        Some(imp) => crate::http::impersonate::act_as(&inner.state.lock().store, &user, &imp)
            .map_err(|e| (e, None))?,
        None => user,
    };
    if path == "/metrics" {
        return Ok(Response::builder()
            .header(header::CONTENT_TYPE, "text/plain; version=0.0.4")
            .body(full(inner.metrics.encode()))
            .expect("valid response"));
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let Some(rp) = parse_res_path(&path) else {
        if req.method() != Method::GET {
            return Err((
                ApiError::method_not_allowed(req.method().as_str(), &path),
                None,
            ));
        }
        return crate::http::discovery::serve(inner, &path, &accept).map_err(|e| (e, None));
    };
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    // every `dryRun` the query carries (the map above keeps the last one)
    let dry_run_query: Vec<String> = req
        .uri()
        .query()
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .filter(|(k, _)| k == "dryRun")
                .map(|(_, v)| v.into_owned())
                .collect()
        })
        .unwrap_or_default();
    let method = req.method().clone();
    let verb = verb_of(&method, &rp, &query);
    // a DELETE may ask for a dry run in its body: counted once the body is read
    if method != Method::DELETE {
        inner
            .metrics
            .count_write(verb, query.get("dryRun").map(String::as_str));
    }
    let rt = inner
        .state
        .lock()
        .registry
        .get(&rp.group, &rp.version, &rp.resource);
    let Some(rt) = rt else {
        return Err((ApiError::no_route(&path), None));
    };
    let labels = RequestLabels {
        verb: verb.to_string(),
        resource: if rt.group.is_empty() {
            rt.plural.clone()
        } else {
            format!("{}/{}", rt.group, rt.plural)
        },
        code: 200,
    };
    let fail = |e: ApiError| (e, Some(labels.clone()));
    if !rt.namespaced && rp.ns.is_some() {
        return Err(fail(ApiError::no_route(&path)));
    }
    if rt.namespaced && rp.ns.is_none() && rp.name.is_some() {
        return Err(fail(ApiError::no_route(&path)));
    }
    if rt.namespaced && rp.ns.is_none() && method == Method::POST {
        return Err(fail(ApiError::method_not_allowed("POST", &path)));
    }
    if let Some(sub) = &rp.sub {
        let token = sub == "token" && rt.group.is_empty() && rt.plural == "serviceaccounts";
        let scale = sub == "scale" && rt.scale.is_some();
        let binding = sub == "binding" && rt.group.is_empty() && rt.plural == "pods";
        let ok = (sub == "status" && rt.status_subresource)
            || (sub == "finalize" && rt.plural == "namespaces")
            || token
            || scale
            || binding;
        if !ok {
            return Err(fail(ApiError::no_route(&path)));
        }
        // `status` and `scale` serve get, update and patch, and nothing else: never a
        // delete or a watch of the object (kube-apiserver routes no other method there;
        // no `/watch/` path leads to a subresource)
        if (scale || sub == "status")
            && !matches!(method, Method::GET | Method::PUT | Method::PATCH)
        {
            return Err(fail(ApiError::method_not_allowed(method.as_str(), &path)));
        }
        if rp.legacy_watch {
            return Err(fail(ApiError::no_route(&path)));
        }
        if (token || binding) && method != Method::POST {
            return Err(fail(ApiError::method_not_allowed(method.as_str(), &path)));
        }
    }
    {
        let selected = selected_name(&method, &rp, &query);
        let st = inner.state.lock();
        let attrs = Attributes {
            verb,
            group: &rt.group,
            resource: &rt.plural,
            subresource: rp.sub.as_deref().unwrap_or(""),
            namespace: rp.ns.as_deref().unwrap_or(""),
            name: rp.name.as_deref().or(selected.as_deref()).unwrap_or(""),
            path: "",
        };
        if !authorize(&st.store, &user, &attrs) {
            return Err(fail(ApiError::forbidden(&user.name, &attrs)));
        }
    }
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown")
        .to_string();
    let body = if matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        match Limited::new(req.into_body(), inner.cfg.max_body)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    return Err(fail(ApiError::too_large(inner.cfg.max_body)));
                }
                return Err(fail(ApiError::bad_request(format!(
                    "failed to read the request body: {e}"
                ))));
            }
        }
    } else {
        Bytes::new()
    };
    if method == Method::DELETE {
        let body_dry_run = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|b| b.get("dryRun").cloned())
            .and_then(|d| d.as_array().map(|a| a.iter().any(|x| x == "All")));
        let dry_run = match (query.get("dryRun"), body_dry_run) {
            (_, Some(true)) => Some("All"),
            (q, _) => q.map(String::as_str),
        };
        inner.metrics.count_write(verb, dry_run);
    }
    validate_dry_run(&method, &body, dry_run_query).map_err(fail)?;
    let decoded = (content_type == "application/vnd.kubernetes.protobuf" && !body.is_empty())
        .then(|| crate::http::protobuf::decode(&body));
    // a Table's rows carry what `includeObject` says (`kubectl get --sort-by` asks for
    // the objects)
    let table = if accept.contains("as=Table") {
        let include = query.get("includeObject").map(String::as_str);
        Some(
            causeway_runtime::table::IncludeObject::parse(include)
                .map_err(|e| fail(ApiError::bad_request(e)))?,
        )
    } else {
        None
    };
    let mut r = Req {
        query,
        table,
        metadata_only: accept.contains("as=PartialObjectMetadata"),
        content_type,
        body,
        user_agent,
        user,
        warnings: Vec::new(),
        decoded,
        admitted: None,
    };
    if verb == "watch" {
        return crate::http::watch::serve(inner.clone(), rt, rp, r).map_err(fail);
    }
    // a PATCH whose object changed while its webhooks decided is admitted again on the
    // new version, as kube-apiserver's update retries do (a few times, then 409)
    let mut tries = 0;
    let mut warned: Vec<String>;
    let result = loop {
        (r.admitted, warned) = admit_by_webhooks(inner, &rt, &rp, &method, &r, &r.user)
            .await
            .map_err(fail)?;
        let result = if rt.is_review() {
            crate::http::reviews::create(inner, &rt, &method, &r.user, &r)
        } else {
            dispatch(inner, &rt, &rp, &method, &mut r)
        };
        match &result {
            Err(e) if e.message.ends_with(crate::verbs::patch::ADMISSION_RACE) && tries < 5 => {
                tries += 1;
            }
            _ => break result,
        }
    };
    match result {
        Ok((code, body)) => {
            let mut l = labels;
            l.code = code;
            inner.metrics.requests.get_or_create(&l).inc();
            let mut resp = json_response(code, body);
            let warnings: Vec<String> = warned.into_iter().chain(r.warnings).collect();
            crate::http::response::add_warnings(&mut resp, &warnings);
            if (200..300).contains(&code) && !matches!(method, Method::GET) {
                inner.changed.notify_one();
            }
            Ok(resp)
        }
        Err(mut e) => {
            e.warnings.splice(0..0, warned);
            Err(fail(e))
        }
    }
}

/// Sends CREATE, UPDATE (PUT and PATCH, of the object or its status) and DELETE of one
/// object to the matching validating webhooks ([`crate::http::webhooks`]); a PATCH is
/// an UPDATE to the patched object, or the CREATE of an apply that creates;
/// deletecollection is not sent. For a PATCH that webhooks were asked about, the
/// resourceVersion of the object they were shown ([`Req::admitted`]); and the
/// warnings of the webhooks that allowed it.
async fn admit_by_webhooks(
    inner: &Inner,
    rt: &ResourceType,
    rp: &ResPath,
    method: &Method,
    r: &Req,
    user: &User,
) -> ApiResult<(Option<Option<String>>, Vec<String>)> {
    let sub = rp.sub.as_deref().unwrap_or("");
    let ns = rp.ns.as_deref().unwrap_or("");
    let stored = |name: &str| {
        inner
            .state
            .lock()
            .store
            .get(&rt.group_resource(), ns, name)
            .map(|o| o.value.clone())
    };
    // what the request may be admitted as; nothing is decoded, copied or previewed
    // unless some webhook's rules cover it (every write passes here)
    let operations: &[&str] = match (method.as_str(), rp.name.is_some(), sub) {
        ("POST", false, "") => &["CREATE"],
        ("PUT", true, "" | "status") => &["UPDATE"],
        ("DELETE", true, "") => &["DELETE"],
        ("PATCH", true, "" | "status") => &["UPDATE", "CREATE"],
        _ => return Ok((None, Vec::new())),
    };
    if !crate::http::webhooks::any_rule_matches(&inner.state.lock(), operations, rt, sub) {
        return Ok((None, Vec::new()));
    }
    // (operation, name, object, old object, the version a PATCH was admitted on)
    let (operation, name, object, old_object, version) =
        match (method.as_str(), rp.name.as_deref(), sub) {
            ("PATCH", Some(name), "" | "status") => {
                // a PATCH that fails here fails the same way when it runs (its own error),
                // unless the object changes first: then it is admitted again
                let Ok((operation, old_object, object)) =
                    crate::verbs::patch::preview(&inner.state, rt, ns, name, sub, r)
                else {
                    let now = stored(name)
                        .map(|o| crate::state::stored::meta_str(&o, "resourceVersion").to_string());
                    return Ok((Some(now), Vec::new()));
                };
                let version = old_object
                    .as_ref()
                    .map(|o| crate::state::stored::meta_str(o, "resourceVersion").to_string());
                (
                    operation,
                    name.to_string(),
                    Some(object),
                    old_object,
                    Some(version),
                )
            }
            ("POST", None, "") => {
                let object = r.decode()?;
                let name = crate::state::stored::meta_str(&object, "name").to_string();
                ("CREATE", name, Some(object), None, None)
            }
            ("PUT", Some(name), "" | "status") => {
                let old_object = stored(name);
                // a status write changes the status only: shown as it will be written
                let object = match (sub, r.decode()?, &old_object) {
                    ("status", body, Some(old)) => {
                        crate::verbs::update::merge_for_update(rt, old, body, "status")
                    }
                    (_, body, _) => body,
                };
                ("UPDATE", name.to_string(), Some(object), old_object, None)
            }
            ("DELETE", Some(name), "") => match stored(name) {
                // nothing to delete: the verb answers NotFound
                None => return Ok((None, Vec::new())),
                old => ("DELETE", name.to_string(), None, old, None),
            },
            _ => return Ok((None, Vec::new())),
        };
    // as kube-apiserver: the webhooks see the object pruned, defaulted and valid (an
    // invalid one fails here, with the schema's error, and no webhook is asked)
    let mut object = object;
    if let Some(o) = object.as_mut() {
        crate::verbs::admit::checked_by_schema(rt, o, r.q("fieldValidation"))?;
    }
    let warned = crate::http::webhooks::admit(
        &inner.state,
        crate::http::webhooks::Request {
            operation,
            rt,
            namespace: ns,
            name: &name,
            subresource: sub,
            user,
            object,
            old_object,
            dry_run: r.q("dryRun") == Some("All"),
        },
    )
    .await?;
    Ok((version, warned))
}

/// The name a list or watch of a collection selects (`fieldSelector=metadata.name=x`),
/// which kube-apiserver's `RequestInfoFactory` makes the request's name: RBAC then
/// checks it against `resourceNames`. Only for a GET of a collection (not the `/watch/`
/// paths), and a name that may be a path segment.
fn selected_name(method: &Method, rp: &ResPath, q: &HashMap<String, String>) -> Option<String> {
    if *method != Method::GET || rp.name.is_some() || rp.legacy_watch {
        return None;
    }
    let fs = crate::state::selectors::FieldSelector::parse(q.get("fieldSelector")?).ok()?;
    let name = fs.pinned_name()?;
    // apimachinery's `IsValidPathSegmentName`
    let valid = !matches!(name, "." | "..") && !name.contains('/') && !name.contains('%');
    valid.then(|| name.to_string())
}

fn verb_of(method: &Method, rp: &ResPath, q: &HashMap<String, String>) -> &'static str {
    // a GET of a subresource is a get, `?watch` or not (kube-apiserver's get handler
    // does not watch)
    let watch = rp.legacy_watch
        || (rp.sub.is_none()
            && matches!(q.get("watch").map(String::as_str), Some("true") | Some("1")));
    match (method.as_str(), rp.name.is_some()) {
        ("GET", true) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

fn dispatch(
    inner: &Inner,
    rt: &Arc<ResourceType>,
    rp: &ResPath,
    method: &Method,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    use crate::verbs::{create, delete, patch, read, update};
    let state = &inner.state;
    let ns = rp.ns.as_deref().unwrap_or("");
    let sub = rp.sub.as_deref().unwrap_or("");
    match (method.as_str(), rp.name.as_deref()) {
        ("POST", Some(name)) if sub == "token" => crate::http::tokens::create(inner, ns, name, r),
        ("POST", Some(name)) if sub == "binding" => {
            crate::verbs::binding::create(state, rt, ns, name, r)
        }
        ("GET", Some(name)) if sub == "scale" => crate::verbs::scale::get(state, rt, ns, name),
        ("PUT" | "PATCH", Some(name)) if sub == "scale" => {
            crate::verbs::scale::write(state, rt, ns, name, method == Method::PATCH, r)
        }
        ("GET", Some(name)) => read::get(state, rt, ns, name, r),
        ("GET", None) => read::list(state, rt, rp.ns.as_deref(), r),
        ("POST", None) => create::create(state, rt, ns, r),
        ("PUT", Some(name)) => update::update(state, rt, ns, name, sub, r),
        ("PATCH", Some(name)) => patch::patch(state, rt, ns, name, sub, r),
        ("DELETE", Some(name)) => delete::delete(state, rt, ns, name, r),
        ("DELETE", None) => delete::delete_collection(state, rt, rp.ns.as_deref(), r),
        (m, _) => Err(ApiError::method_not_allowed(m, &rt.plural)),
    }
}
