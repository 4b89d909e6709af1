//! Any byte string as a query, over UDP and TCP: never a panic, and a UDP answer
//! never exceeds the server's payload limit.
#![no_main]

use std::sync::OnceLock;

use causeway_dns::answer::{Outcome, Settings, Transport, respond};
use causeway_dns::index::{
    EndpointInput, ImportInput, PortInput, ServiceKind, SliceInput, Zone, ZoneConfig,
};
use libfuzzer_sys::fuzz_target;

fn zone() -> &'static Zone {
    static ZONE: OnceLock<Zone> = OnceLock::new();
    ZONE.get_or_init(|| {
        let cfg = ZoneConfig {
            zone: "clusterset.local".into(),
            ttl: 5,
            nameservers: vec![],
        };
        let port = PortInput {
            name: Some("http".into()),
            protocol: "TCP".into(),
            port: 80,
        };
        let cs = ImportInput {
            namespace: "ns".into(),
            name: "web".into(),
            kind: ServiceKind::ClusterSetIp,
            ips: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            ports: vec![port.clone()],
        };
        let hl = ImportInput {
            name: "db".into(),
            kind: ServiceKind::Headless,
            ips: vec![],
            ..cs.clone()
        };
        let slice = SliceInput {
            namespace: "ns".into(),
            service: "db".into(),
            cluster: "c1".into(),
            endpoints: (0..80)
                .map(|i| EndpointInput {
                    addresses: vec![format!("10.1.0.{i}").parse().unwrap()],
                    hostname: None,
                    ready: true,
                })
                .collect(),
            ports: vec![port],
        };
        Zone::build(&cfg, 1, [&cs, &hl], [&slice]).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let settings = Settings {
        forward: data.first().is_some_and(|b| b & 1 == 1),
        max_udp_payload: 1232,
    };
    let mut out = Vec::new();
    if let Outcome::Reply { .. } = respond(zone(), &settings, data, Transport::Udp, &mut out) {
        assert!(out.len() <= 1232);
        assert!(out.len() >= 12);
    }
    let _ = respond(zone(), &settings, data, Transport::Tcp, &mut out);
});
