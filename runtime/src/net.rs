//! Accepting connections the same way in every server: an accept error (for example
//! running out of file descriptors) is logged and retried after a short pause instead
//! of ending the server or spinning, and cancellation ends the loop.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How long to wait after a failed accept before trying again.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The next connection on `listener`, or None once `stop` is cancelled. `what` names
/// the listener in the log line of a failed accept.
pub async fn accept(
    listener: &TcpListener,
    stop: &CancellationToken,
    what: &'static str,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok(conn) => return Some(conn),
                Err(e) => {
                    tracing::warn!(listener = what, error = %e, "accept failed; retrying");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
            _ = stop.cancelled() => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepts_until_cancelled() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let client = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (_conn, peer) = accept(&listener, &stop, "test")
            .await
            .expect("a connection");
        assert_eq!(peer, client.await.unwrap().local_addr().unwrap());
        stop.cancel();
        assert!(accept(&listener, &stop, "test").await.is_none());
    }
}
