//! Printer columns: their shape (CRDs' `additionalPrinterColumns`) and those of the
//! built-in kinds, as kubectl's built-in printers show them (besides Name and Age); and
//! the built-in kinds' short names (`kubectl get deploy`), for discovery.

/// A printer column.
#[derive(Debug, Clone)]
pub struct Column {
    /// Header.
    pub name: String,
    /// `string`, `integer`, `date`, ...
    pub type_: String,
    /// JSONPath (kubectl style, without braces).
    pub json_path: String,
    /// Priority (0 shown by default, >0 only with -o wide).
    pub priority: i64,
    /// Description.
    pub description: String,
}

impl Column {
    /// A column without a description.
    pub fn new(name: &str, type_: &str, path: &str, priority: i64) -> Column {
        Column {
            name: name.into(),
            type_: type_.into(),
            json_path: path.into(),
            priority,
            description: String::new(),
        }
    }
}

fn col(name: &str, type_: &str, path: &str, priority: i64) -> Column {
    Column::new(name, type_, path, priority)
}

/// Printer columns of the built-in kinds (besides Name and Age).
pub fn builtin(group: &str, plural: &str) -> Vec<Column> {
    match (group, plural) {
        ("", "namespaces") => vec![col("Status", "string", ".status.phase", 0)],
        ("", "services") => vec![
            col("Type", "string", ".spec.type", 0),
            col("Cluster-IP", "string", ".spec.clusterIP", 0),
            col("External-IP", "string", "@external-ip", 0),
            col("Port(s)", "string", "@service-ports", 0),
            col("Selector", "string", "@selector", 1),
        ],
        ("", "pods") => vec![
            col("Status", "string", ".status.phase", 0),
            col("IP", "string", ".status.podIP", 1),
            col("Node", "string", ".spec.nodeName", 1),
        ],
        ("", "nodes") => vec![col(
            "Status",
            "string",
            ".status.conditions[?(@.type==\"Ready\")].status",
            0,
        )],
        ("", "configmaps") | ("", "secrets") => vec![],
        // both Event APIs share core storage, so the rows are core Events
        ("", "events") | ("events.k8s.io", "events") => vec![
            col("Type", "string", ".type", 0),
            col("Reason", "string", ".reason", 0),
            col("Object", "string", "@event-object", 0),
            col("Message", "string", ".message", 0),
        ],
        ("discovery.k8s.io", "endpointslices") => vec![
            col("AddressType", "string", ".addressType", 0),
            col("Ports", "string", ".ports[*].port", 0),
            col("Endpoints", "string", ".endpoints[*].addresses[0]", 0),
        ],
        ("apps", "deployments") | ("apps", "statefulsets") => vec![
            col("Ready", "integer", ".status.readyReplicas", 0),
            col("Replicas", "integer", ".spec.replicas", 0),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![col("Holder", "string", ".spec.holderIdentity", 0)]
        }
        ("networking.k8s.io", "ingresses") => vec![
            col("Class", "string", ".spec.ingressClassName", 0),
            col("Hosts", "string", ".spec.rules[*].host", 0),
        ],
        ("networking.k8s.io", "ingressclasses") => {
            vec![col("Controller", "string", ".spec.controller", 0)]
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![col("Created At", "date", ".metadata.creationTimestamp", 0)]
        }
        _ => vec![],
    }
}

/// The short names kube-apiserver's discovery gives the built-in kinds.
pub fn short_names(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "namespaces") => &["ns"],
        ("", "services") => &["svc"],
        ("", "endpoints") => &["ep"],
        ("", "configmaps") => &["cm"],
        ("", "serviceaccounts") => &["sa"],
        ("", "nodes") => &["no"],
        ("", "pods") => &["po"],
        ("", "events") => &["ev"],
        ("", "persistentvolumeclaims") => &["pvc"],
        ("events.k8s.io", "events") => &["ev"],
        ("apps", "deployments") => &["deploy"],
        ("apps", "statefulsets") => &["sts"],
        ("apps", "daemonsets") => &["ds"],
        ("apps", "replicasets") => &["rs"],
        ("batch", "cronjobs") => &["cj"],
        ("networking.k8s.io", "ingresses") => &["ing"],
        ("networking.k8s.io", "networkpolicies") => &["netpol"],
        ("apiextensions.k8s.io", "customresourcedefinitions") => &["crd", "crds"],
        ("policy", "poddisruptionbudgets") => &["pdb"],
        ("autoscaling", "horizontalpodautoscalers") => &["hpa"],
        _ => &[],
    }
}
