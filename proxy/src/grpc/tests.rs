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

/// A body of frames `f` hands out.
fn body_of<F>(f: F) -> Pin<Box<dyn Body<Data = Bytes, Error = BoxError> + Send>>
where
    F: FnMut() -> Poll<Option<Result<Frame<Bytes>, BoxError>>> + Send + Unpin + 'static,
{
    struct Fn<F>(F);
    impl<F> Body for Fn<F>
    where
        F: FnMut() -> Poll<Option<Result<Frame<Bytes>, BoxError>>> + Unpin,
    {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            (self.get_mut().0)()
        }
    }
    Box::pin(Fn(f))
}

#[tokio::test]
async fn a_deadline_ends_a_streaming_body_with_deadline_exceeded_trailers() {
    // A body that never ends.
    let inner = body_of(|| Poll::Pending);
    let at = Instant::now() + Duration::from_millis(100);
    let mut d = Ending::new(inner, Some(at));
    let f = d.frame().await.unwrap().unwrap();
    let t = f.into_trailers().unwrap();
    assert_eq!(t["grpc-status"], "4");
    assert!(Instant::now() >= at);
    assert!(d.frame().await.is_none());
    // A body that ends in time is passed on as it is.
    let mut d = Ending::new(
        Full::new(Bytes::from_static(b"ok")).map_err(|e| match e {}),
        Some(at + Duration::from_secs(60)),
    );
    assert_eq!(d.frame().await.unwrap().unwrap().into_data().unwrap(), "ok");
    assert!(d.frame().await.is_none());
}

/// An upstream always ahead of its client (a frame ready whenever the body is polled)
/// still ends at the deadline.
#[tokio::test]
async fn a_deadline_ends_a_body_that_always_has_a_frame_ready() {
    let inner = body_of(|| Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x"))))));
    let at = Instant::now() + Duration::from_millis(50);
    let mut d = Ending::new(inner, Some(at));
    let give_up = std::time::Instant::now() + Duration::from_secs(5);
    let trailers = loop {
        assert!(
            std::time::Instant::now() < give_up,
            "still streaming 5 s after a 50 ms deadline"
        );
        let f = d.frame().await.unwrap().unwrap();
        if let Ok(t) = f.into_trailers() {
            break t;
        }
    };
    assert_eq!(trailers["grpc-status"], "4");
    assert!(Instant::now() >= at);
    assert!(d.frame().await.is_none());
}

/// A body that fails ends with trailers instead: the read timeout as
/// `DEADLINE_EXCEEDED`, anything else (the upstream gone) as `UNAVAILABLE`.
#[tokio::test]
async fn a_failing_body_ends_with_grpc_trailers() {
    for (err, want) in [
        (
            Box::new(ReadTimedOut(Duration::from_secs(60))) as BoxError,
            "4",
        ),
        ("connection reset".into(), "14"),
    ] {
        let mut first = Some(Frame::data(Bytes::from_static(b"a")));
        let mut err = Some(err);
        let inner = body_of(move || match first.take() {
            Some(f) => Poll::Ready(Some(Ok(f))),
            None => Poll::Ready(err.take().map(Err)),
        });
        let mut d = Ending::new(inner, None);
        assert_eq!(d.frame().await.unwrap().unwrap().into_data().unwrap(), "a");
        let t = d.frame().await.unwrap().unwrap().into_trailers().unwrap();
        assert_eq!(t["grpc-status"], want, "{t:?}");
        assert!(t.contains_key("grpc-message"));
        assert!(d.frame().await.is_none());
        assert!(d.is_end_stream());
    }
    // Trailers the upstream sent end the body: the deadline cannot add more.
    let mut sent = false;
    let inner = body_of(move || {
        if std::mem::replace(&mut sent, true) {
            return Poll::Pending;
        }
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("0"));
        Poll::Ready(Some(Ok(Frame::trailers(t))))
    });
    let mut d = Ending::new(inner, Some(Instant::now() + Duration::from_millis(10)));
    let t = d.frame().await.unwrap().unwrap().into_trailers().unwrap();
    assert_eq!(t["grpc-status"], "0");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(d.frame().await.is_none());
}

#[test]
fn timeouts_sent_upstream_are_what_is_left_in_at_most_8_digits() {
    for (left, want) in [
        (Duration::from_millis(4_999), "4999m"),
        (Duration::from_micros(4_999_999), "4999m"),
        (Duration::from_micros(999), "999u"),
        (Duration::from_nanos(999), "999n"),
        (Duration::from_nanos(1), "1n"),
        (Duration::from_millis(99_999_999), "99999999m"),
        (Duration::from_millis(100_000_000), "100000S"),
        (Duration::from_secs(100_000_000), "1666666M"),
        (Duration::from_secs(u64::MAX), "99999999H"),
    ] {
        let v = encode_timeout(left);
        assert_eq!(v, want, "{left:?}");
        // What the upstream reads back is never later than what was left.
        let mut h = HeaderMap::new();
        h.insert(TIMEOUT, v);
        assert!(timeout(&h).unwrap() <= left, "{left:?}");
    }
}

#[test]
fn trailers_only_failures_count_as_their_http_status_for_health() {
    let ok = StatusCode::OK;
    for (code, want) in [
        (None, 200),
        (Some(0), 200),
        (Some(code::UNAVAILABLE), 503),
        (Some(code::INTERNAL), 500),
        (Some(2), 500),
        (Some(15), 500),
        (Some(code::DEADLINE_EXCEEDED), 504),
        (Some(5), 200),
        (Some(code::RESOURCE_EXHAUSTED), 200),
    ] {
        assert_eq!(health_status(ok, code, false), want, "{code:?}");
    }
    assert_eq!(health_status(StatusCode::BAD_GATEWAY, None, false), 502);
}

/// A call with a deadline that ran out at the pod (whose copy of it, rounded down,
/// fires first) is the client's budget, not the pod failing.
#[test]
fn deadline_exceeded_to_a_call_with_a_deadline_is_no_failure() {
    let ok = StatusCode::OK;
    assert_eq!(health_status(ok, Some(code::DEADLINE_EXCEEDED), true), 200);
    assert_eq!(health_status(ok, Some(code::UNAVAILABLE), true), 503);
    assert_eq!(health_status(ok, Some(code::INTERNAL), true), 500);
}

#[test]
fn a_deadline_is_capped_so_no_client_lifts_the_timeouts() {
    for v in ["99999999H", "99999999M", "99999999S", "2H"] {
        assert_eq!(timeout(&with("grpc-timeout", v)), Some(MAX_DEADLINE), "{v}");
    }
    assert_eq!(
        timeout(&with("grpc-timeout", "5S")),
        Some(Duration::from_secs(5))
    );
}

/// Without trailers (an HTTP/1.1 client, a response that is not gRPC) an upstream
/// failure stays an error, and so does the deadline: never a clean end.
#[tokio::test]
async fn an_erring_body_passes_failures_and_the_deadline_as_errors() {
    let mut first = Some(Frame::data(Bytes::from_static(b"a")));
    let mut err = Some(BoxError::from("connection reset"));
    let inner = body_of(move || match first.take() {
        Some(f) => Poll::Ready(Some(Ok(f))),
        None => Poll::Ready(err.take().map(Err)),
    });
    let mut d = Ending::erring(inner, Instant::now() + Duration::from_secs(60));
    assert_eq!(d.frame().await.unwrap().unwrap().into_data().unwrap(), "a");
    let e = d.frame().await.unwrap().unwrap_err();
    assert!(e.to_string().contains("connection reset"), "{e}");
    assert!(d.frame().await.is_none());
    let inner = body_of(|| Poll::Pending);
    let at = Instant::now() + Duration::from_millis(50);
    let mut d = Ending::erring(inner, at);
    assert!(d.frame().await.unwrap().is_err());
    assert!(Instant::now() >= at);
    assert!(d.frame().await.is_none());
}
