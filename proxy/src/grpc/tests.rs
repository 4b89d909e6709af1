use http::HeaderMap;
use http_body_util::{BodyExt, Full};

use super::*;

fn with(name: &'static str, value: &'static str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(name, HeaderValue::from_static(value));
    h
}

#[test]
fn grpc_calls_are_told_by_their_content_type() {
    for (ct, want) in [
        ("application/grpc", true),
        ("application/grpc+proto", true),
        ("Application/GRPC+json", true),
        ("application/grpc;charset=utf-8", true),
        ("application/grpc-web", false),
        ("application/grpc-web+proto", false),
        ("application/json", false),
        ("application/grp", false),
    ] {
        assert_eq!(is_grpc(&with("content-type", ct)), want, "{ct}");
    }
    assert!(!is_grpc(&HeaderMap::new()));
}

#[test]
fn grpc_timeout_parses_every_unit_and_refuses_the_rest() {
    for (v, want) in [
        ("1H", Some(Duration::from_secs(3600))),
        ("2M", Some(Duration::from_secs(120))),
        ("3S", Some(Duration::from_secs(3))),
        ("250m", Some(Duration::from_millis(250))),
        ("7u", Some(Duration::from_micros(7))),
        ("99999999n", Some(Duration::from_nanos(99_999_999))),
        ("0m", Some(Duration::ZERO)),
        ("100", None),
        ("m", None),
        ("123456789m", None),
        ("1.5S", None),
        ("-1S", None),
        ("10s", None),
    ] {
        assert_eq!(timeout(&with("grpc-timeout", v)), want, "{v}");
    }
    assert_eq!(timeout(&HeaderMap::new()), None);
}

#[test]
fn proxy_answers_map_to_grpc_codes() {
    for (status, want) in [
        (404, code::UNIMPLEMENTED),
        (503, code::UNAVAILABLE),
        (502, code::UNAVAILABLE),
        (504, code::DEADLINE_EXCEEDED),
        (408, code::DEADLINE_EXCEEDED),
        (400, code::INTERNAL),
        (429, code::RESOURCE_EXHAUSTED),
    ] {
        let s = StatusCode::from_u16(status).unwrap();
        assert_eq!(code_for(s), want, "{status}");
    }
}

#[test]
fn made_answers_become_trailers_only_grpc_answers() {
    let mut r: Response<String> = Response::new("503 ...".into());
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r.extensions_mut()
        .insert(Made("no ready endpoints for 100% of ünits\n".into()));
    let g = answer(r);
    assert_eq!(g.status(), StatusCode::OK);
    assert_eq!(g.headers()["content-type"], "application/grpc");
    assert_eq!(g.headers()["grpc-status"], "14");
    assert_eq!(
        g.headers()["grpc-message"],
        "no ready endpoints for 100%25 of %C3%BCnits"
    );
    assert!(g.body().is_empty());
    // Not made by the proxy: unchanged.
    let mut up: Response<String> = Response::new("x".into());
    *up.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    assert_eq!(answer(up).status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[test]
fn retry_sets_and_statuses() {
    let on = 1 << 14 | 1 << 8;
    assert!(retried(on, 14) && retried(on, 8));
    assert!(!retried(on, 0) && !retried(on, 13) && !retried(on, 99));
    assert_eq!(status(&with("grpc-status", "14")), Some(14));
    assert_eq!(status(&with("grpc-status", "x")), None);
    assert_eq!(status(&HeaderMap::new()), None);
}

#[tokio::test]
async fn a_deadline_ends_a_streaming_body_with_deadline_exceeded_trailers() {
    // A body that never ends.
    let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(1);
    let inner = Box::pin(http_body_util::StreamBody::new(futures::stream::unfold(
        rx,
        |mut rx| async { rx.recv().await.map(|f| (f, rx)) },
    )));
    let at = Instant::now() + Duration::from_millis(100);
    let mut d = Deadline::new(inner, at);
    let f = d.frame().await.unwrap().unwrap();
    let t = f.into_trailers().unwrap();
    assert_eq!(t["grpc-status"], "4");
    assert!(Instant::now() >= at);
    assert!(d.frame().await.is_none());
    // A body that ends in time is passed on as it is.
    let mut d = Deadline::new(
        Full::new(Bytes::from_static(b"ok")),
        at + Duration::from_secs(60),
    );
    assert_eq!(d.frame().await.unwrap().unwrap().into_data().unwrap(), "ok");
    assert!(d.frame().await.is_none());
}
