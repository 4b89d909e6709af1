//! causeway-proxy against a real kubesim hub, real backends on loopback IPs and real
//! clients (one test binary; modules per area).

mod balancing;
mod binary;
mod errors;
mod gateway;
mod grpc;
mod grpc_support;
mod h1;
mod h2;
mod harness;
mod layering;
mod pool;
mod protocols;
mod requests;
mod routing;
mod scripted;
