//! What the tests of the `causeway` binary share: its log, its admin endpoints.
#![allow(dead_code)] // each test binary uses only some of these

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Waits for `needle` in the log file at `log` (30 s at most); returns the log.
pub fn wait_for_log(log: &std::path::Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut text = String::new();
    while !text.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} line within 30 s; log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
        text.clear();
        std::fs::File::open(log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
    }
    text
}

/// The admin address a `causeway` process logged ("serving /metrics ... addr=...").
pub fn admin_addr(log: &str) -> String {
    log.split("addr=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the admin address in the log")
        .to_string()
}

/// One plain HTTP GET; the whole response (empty when nothing listens).
pub fn get(addr: &str, path: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// One plain HTTP GET; the status line.
pub fn status(addr: &str, path: &str) -> String {
    get(addr, path)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}
