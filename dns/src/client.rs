//! A minimal stub-resolver client for tests, `causeway-local` and diagnostics: one
//! question over UDP or TCP, the answer summarised.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, Query};
pub use hickory_proto::rr::RecordType;
use hickory_proto::rr::{Name, RData};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// Why a lookup failed (not a DNS error code: those are in [`Answer::rcode`]).
#[derive(Debug, Error)]
pub enum ClientError {
    /// The name could not be encoded.
    #[error("bad name {0:?}: {1}")]
    Name(String, String),
    /// Socket trouble.
    #[error("talking to {0}: {1}")]
    Io(SocketAddr, std::io::Error),
    /// No answer in time.
    #[error("no answer from {0} within {1:?}")]
    Timeout(SocketAddr, Duration),
    /// The answer did not decode.
    #[error("undecodable answer from {0}: {1}")]
    Decode(SocketAddr, String),
}

/// A summarised answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Response code (0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED).
    pub rcode: u16,
    /// A and AAAA data, sorted.
    pub addresses: Vec<IpAddr>,
    /// SRV (port, target), sorted.
    pub srv: Vec<(u16, String)>,
    /// TXT strings.
    pub txt: Vec<String>,
    /// TC was set.
    pub truncated: bool,
}

/// Which transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// UDP with EDNS0 (payload 1232).
    Udp,
    /// TCP.
    Tcp,
}

/// Asks `server` for `name` (absolute or not; a trailing dot is added) of `qtype`
/// (e.g. `RecordType::A`), with one attempt of at most `timeout`.
pub async fn lookup(
    server: SocketAddr,
    via: Via,
    name: &str,
    qtype: RecordType,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    let fqdn = if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    };
    let qname =
        Name::from_ascii(&fqdn).map_err(|e| ClientError::Name(name.into(), e.to_string()))?;
    let mut m = Message::query();
    m.metadata.id = rand_id();
    m.add_query(Query::query(qname, qtype));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    m.set_edns(edns);
    let pkt = m
        .to_vec()
        .map_err(|e| ClientError::Name(name.into(), e.to_string()))?;
    let io = |e| ClientError::Io(server, e);
    let raw = tokio::time::timeout(timeout, async {
        match via {
            Via::Udp => {
                let bind: SocketAddr = if server.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let sock = UdpSocket::bind(bind).await.map_err(io)?;
                sock.connect(server).await.map_err(io)?;
                sock.send(&pkt).await.map_err(io)?;
                let mut buf = vec![0u8; 65535];
                loop {
                    let n = sock.recv(&mut buf).await.map_err(io)?;
                    if n >= 2 && buf[..2] == pkt[..2] {
                        buf.truncate(n);
                        return Ok(buf);
                    }
                }
            }
            Via::Tcp => {
                let mut s = TcpStream::connect(server).await.map_err(io)?;
                let mut framed = (pkt.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&pkt);
                s.write_all(&framed).await.map_err(io)?;
                let len = s.read_u16().await.map_err(io)? as usize;
                let mut buf = vec![0u8; len];
                s.read_exact(&mut buf).await.map_err(io)?;
                Ok(buf)
            }
        }
    })
    .await
    .map_err(|_| ClientError::Timeout(server, timeout))??;
    let msg = Message::from_vec(&raw).map_err(|e| ClientError::Decode(server, e.to_string()))?;
    let mut a = Answer {
        rcode: u16::from(msg.metadata.response_code),
        addresses: Vec::new(),
        srv: Vec::new(),
        txt: Vec::new(),
        truncated: msg.metadata.truncation,
    };
    for r in &msg.answers {
        match &r.data {
            RData::A(x) => a.addresses.push(IpAddr::V4(x.0)),
            RData::AAAA(x) => a.addresses.push(IpAddr::V6(x.0)),
            RData::SRV(s) => a.srv.push((s.port, s.target.to_string())),
            RData::TXT(t) => a.txt.push(t.to_string()),
            _ => {}
        }
    }
    a.addresses.sort();
    a.srv.sort();
    Ok(a)
}

fn rand_id() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ (nanos >> 16)) as u16
}
