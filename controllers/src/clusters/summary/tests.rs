use super::*;

/// A kubesim member and an admin client for it.
pub(crate) async fn member(cfg: kubesim::Config) -> (kubesim::Server, kube::Client) {
    let server = kubesim::Server::start(cfg).await.expect("kubesim starts");
    let client = server.client().await;
    (server, client)
}

/// Node "n" (what [`pod`] binds to).
fn node(ready: bool, cpu_milli: i64, memory: i64) -> NodeEntry {
    NodeEntry {
        name: "n".into(),
        ready,
        cpu_milli,
        memory,
        pods: 110,
        ..Default::default()
    }
}

/// A pod, bound to node "n" or to none.
fn pod(bound: bool, finished: bool, cpu_milli: i64, memory: i64) -> PodEntry {
    PodEntry {
        node: bound.then(|| "n".to_string()),
        finished,
        cpu_milli,
        memory,
    }
}

fn list(cpu: &str, memory: &str, pods: &str) -> BTreeMap<String, Quantity> {
    [("cpu", cpu), ("memory", memory), ("pods", pods)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

#[test]
fn summaries_count_ready_nodes_and_unfinished_pods_by_binding() {
    const GI: i64 = 1 << 30;
    struct Case {
        name: &'static str,
        nodes: Vec<NodeEntry>,
        pods: Vec<PodEntry>,
        want: (i32, i32),
        allocatable: BTreeMap<String, Quantity>,
        allocated: BTreeMap<String, Quantity>,
        allocating: BTreeMap<String, Quantity>,
    }
    let table = vec![
        Case {
            name: "nothing",
            nodes: vec![],
            pods: vec![],
            want: (0, 0),
            allocatable: list("0", "0", "0"),
            allocated: list("0", "0", "0"),
            allocating: list("0", "0", "0"),
        },
        Case {
            name: "a NotReady node counts in total only",
            nodes: vec![
                node(true, 4000, 8 * GI),
                node(false, 8000, 32 * GI),
                node(true, 3500, 8 * GI),
            ],
            pods: vec![],
            want: (3, 2),
            allocatable: list("7500m", "16Gi", "220"),
            allocated: list("0", "0", "0"),
            allocating: list("0", "0", "0"),
        },
        Case {
            name: "bound pods are allocated, pending ones allocating, finished ones nothing",
            nodes: vec![node(true, 8000, 32 * GI)],
            pods: vec![
                pod(true, false, 500, GI / 2),
                pod(true, false, 1000, GI),
                pod(false, false, 250, 128 << 20),
                pod(true, true, 4000, 4 * GI),
                pod(false, true, 4000, 4 * GI),
            ],
            want: (1, 1),
            allocatable: list("8", "32Gi", "110"),
            allocated: list("1500m", "1536Mi", "2"),
            allocating: list("250m", "128Mi", "1"),
        },
        Case {
            name: "pods on a NotReady node count nowhere, as its capacity does not",
            nodes: vec![
                NodeEntry {
                    name: "a".into(),
                    ..node(true, 4000, 8 * GI)
                },
                NodeEntry {
                    name: "b".into(),
                    ..node(false, 4000, 8 * GI)
                },
            ],
            pods: vec![
                PodEntry {
                    node: Some("a".into()),
                    ..pod(true, false, 1000, GI)
                },
                PodEntry {
                    node: Some("b".into()),
                    ..pod(true, false, 3500, 4 * GI)
                },
                PodEntry {
                    node: Some("gone".into()),
                    ..pod(true, false, 500, GI)
                },
            ],
            want: (2, 1),
            allocatable: list("4", "8Gi", "110"),
            allocated: list("1", "1Gi", "1"),
            allocating: list("0", "0", "0"),
        },
    ];
    for c in table {
        let s = summarize(&c.nodes, &c.pods, &ClusterSpec::default());
        assert_eq!((s.nodes.total_num, s.nodes.ready_num), c.want, "{}", c.name);
        assert_eq!(s.resources.allocatable, c.allocatable, "{}", c.name);
        assert_eq!(s.resources.allocated, c.allocated, "{}", c.name);
        assert_eq!(s.resources.allocating, c.allocating, "{}", c.name);
    }
}

#[test]
fn topology_comes_from_the_spec_else_from_what_the_nodes_agree_on() {
    let at = |region: Option<&str>, zone: Option<&str>, provider: Option<&str>| NodeEntry {
        region: region.map(String::from),
        zone: zone.map(String::from),
        provider: provider.map(String::from),
        ..Default::default()
    };
    let spec =
        |region: Option<&str>, zone: Option<&str>, zones: &[&str], provider: Option<&str>| {
            ClusterSpec {
                region: region.map(String::from),
                zone: zone.map(String::from),
                zones: zones.iter().map(|z| z.to_string()).collect(),
                provider: provider.map(String::from),
                ..Default::default()
            }
        };
    let topo = |region: Option<&str>, zones: &[&str], provider: Option<&str>| Topology {
        region: region.map(String::from),
        zones: zones.iter().map(|z| z.to_string()).collect(),
        provider: provider.map(String::from),
    };
    let agreeing = vec![
        at(Some("eu-west-1"), Some("eu-west-1b"), Some("aws")),
        at(Some("eu-west-1"), Some("eu-west-1a"), Some("aws")),
        at(None, Some("eu-west-1b"), None),
    ];
    let disagreeing = vec![
        at(Some("eu-west-1"), Some("a"), Some("aws")),
        at(Some("us-east-1"), Some("b"), Some("gce")),
    ];
    let none = vec![];
    let table: Vec<(&str, &Vec<NodeEntry>, ClusterSpec, Topology)> = vec![
        (
            "labelled nodes agree (unlabelled ones abstain)",
            &agreeing,
            ClusterSpec::default(),
            topo(
                Some("eu-west-1"),
                &["eu-west-1a", "eu-west-1b"],
                Some("aws"),
            ),
        ),
        (
            "nodes disagree: no region or provider, every zone",
            &disagreeing,
            ClusterSpec::default(),
            topo(None, &["a", "b"], None),
        ),
        (
            "the spec overrides the labels",
            &agreeing,
            spec(Some("on-prem"), None, &["z2", "z1"], Some("metal")),
            topo(Some("on-prem"), &["z1", "z2"], Some("metal")),
        ),
        (
            "spec.zone when there is no spec.zones",
            &disagreeing,
            spec(None, Some("only"), &[], None),
            topo(None, &["only"], None),
        ),
        (
            "spec.zones wins over spec.zone; empty strings do not override",
            &agreeing,
            spec(Some(""), Some("only"), &["z"], Some("")),
            topo(Some("eu-west-1"), &["z"], Some("aws")),
        ),
        (
            "no nodes, no spec",
            &none,
            ClusterSpec::default(),
            topo(None, &[], None),
        ),
    ];
    for (name, nodes, spec, want) in table {
        assert_eq!(summarize(nodes, &[], &spec).topology, want, "{name}");
    }
}

#[test]
fn a_summary_fills_only_its_status_fields() {
    let s = summarize(
        &[NodeEntry {
            ready: true,
            region: Some("r".into()),
            zone: Some("z".into()),
            provider: Some("p".into()),
            ..Default::default()
        }],
        &[],
        &ClusterSpec::default(),
    );
    let mut status = ClusterStatus {
        kubernetes_version: Some("v1.33.0".into()),
        ..Default::default()
    };
    s.fill(&mut status);
    assert_eq!(status.kubernetes_version.as_deref(), Some("v1.33.0"));
    assert_eq!(
        status.node_summary,
        Some(NodeSummary {
            total_num: 1,
            ready_num: 1
        })
    );
    assert_eq!(
        (
            status.region.as_deref(),
            status.zones.as_slice(),
            status.provider.as_deref()
        ),
        (Some("r"), &["z".to_string()][..], Some("p"))
    );
    assert!(status.resource_summary.is_some());
}
