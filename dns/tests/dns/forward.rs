//! `--forward`: names outside the zone are relayed to the upstream.

use hickory_proto::rr::RecordType;

use crate::support::{Env, ask_tcp, ask_udp, eventually};

#[tokio::test]
async fn out_of_zone_names_are_forwarded_over_udp_and_tcp() {
    // The upstream: a second causeway-dns serving another zone.
    let mut upstream = Env::start_with(|c| c.zone = "upstream.test".into()).await;
    let up = upstream.dns().udp;
    let main = causeway_dns::start(
        upstream.client.clone(),
        causeway_dns::Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            forward: Some(up),
            ..causeway_dns::Config::default()
        },
    )
    .await
    .unwrap();
    eventually("main synced", || async { main.ready() }).await;
    let name = "dns-version.upstream.test.";
    let r = ask_udp(main.udp, name, RecordType::TXT, None).await;
    assert_eq!(
        (r.rcode, r.answers.clone()),
        (0, vec!["TXT 1.0.0".to_string()]),
        "{r:?}"
    );
    let r = ask_tcp(main.tcp, name, RecordType::TXT).await;
    assert_eq!(r.answers, ["TXT 1.0.0"]);
    let r = ask_udp(main.udp, "nope.upstream.test.", RecordType::A, Some(1232)).await;
    assert_eq!(r.rcode, 3);
    // Its own zone is still answered locally.
    let r = ask_udp(
        main.udp,
        "dns-version.clusterset.local.",
        RecordType::TXT,
        None,
    )
    .await;
    assert_eq!(r.answers, ["TXT 1.0.0"]);
    let udp = main.udp;
    main.shutdown().await;
    // The UDP workers are gone and the socket closed: the port can be bound again.
    std::net::UdpSocket::bind(udp).expect("UDP port free after shutdown");
    if let Some(d) = upstream.dns.take() {
        d.shutdown().await;
    }
}
