//! causeway-dns against a real kubesim API server, queried over real UDP and TCP
//! sockets on 127.0.0.1. One test binary (link time); one module per concern.

mod binary;
mod forward;
mod health;
mod records;
mod robustness;
mod support;
mod sync;
mod udp;
