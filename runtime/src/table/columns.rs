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

/// Age where kubectl puts it before further columns (without it, Age comes last).
fn age() -> Column {
    col("Age", "date", ".metadata.creationTimestamp", 0)
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
            col("Ready", "string", "@pod-ready", 0),
            col("Status", "string", "@pod-status", 0),
            col("Restarts", "integer", "@pod-restarts", 0),
            age(),
            col("IP", "string", ".status.podIP", 1),
            col("Node", "string", ".spec.nodeName", 1),
        ],
        ("", "nodes") => vec![
            col("Status", "string", "@node-status", 0),
            col("Roles", "string", "@node-roles", 0),
            age(),
            col("Version", "string", ".status.nodeInfo.kubeletVersion", 0),
        ],
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
        ("apps", "deployments") => vec![
            col("Ready", "string", "@ready-of-replicas", 0),
            col("Up-to-date", "integer", "@int:/status/updatedReplicas", 0),
            col("Available", "integer", "@int:/status/availableReplicas", 0),
        ],
        ("apps", "statefulsets") => vec![col("Ready", "string", "@ready-of-replicas", 0)],
        ("apps", "replicasets") => vec![
            col("Desired", "integer", "@int:/spec/replicas", 0),
            col("Current", "integer", "@int:/status/replicas", 0),
            col("Ready", "integer", "@int:/status/readyReplicas", 0),
        ],
        ("apps", "daemonsets") => vec![
            col(
                "Desired",
                "integer",
                "@int:/status/desiredNumberScheduled",
                0,
            ),
            col(
                "Current",
                "integer",
                "@int:/status/currentNumberScheduled",
                0,
            ),
            col("Ready", "integer", "@int:/status/numberReady", 0),
            col(
                "Up-to-date",
                "integer",
                "@int:/status/updatedNumberScheduled",
                0,
            ),
            col("Available", "integer", "@int:/status/numberAvailable", 0),
            col("Node Selector", "string", "@node-selector", 0),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![col("Holder", "string", ".spec.holderIdentity", 0)]
        }
        ("networking.k8s.io", "ingresses") => vec![
            col("Class", "string", "@or-none:/spec/ingressClassName", 0),
            col("Hosts", "string", ".spec.rules[*].host", 0),
            col("Address", "string", "@ingress-address", 0),
            col("Ports", "string", "@ingress-ports", 0),
        ],
        ("networking.k8s.io", "ingressclasses") => {
            vec![col("Controller", "string", ".spec.controller", 0)]
        }
        ("apiextensions.k8s.io", "customresourcedefinitions")
        | ("rbac.authorization.k8s.io", "roles" | "clusterroles") => {
            vec![col("Created At", "date", "@created-at", 0)]
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => vec![
            col("Role", "string", "@ref:/roleRef", 0),
            age(),
            col("Users", "string", "@subjects:User", 1),
            col("Groups", "string", "@subjects:Group", 1),
            col("ServiceAccounts", "string", "@subjects:ServiceAccount", 1),
        ],
        ("policy", "poddisruptionbudgets") => vec![
            col("Min Available", "string", "@or-na:/spec/minAvailable", 0),
            col(
                "Max Unavailable",
                "string",
                "@or-na:/spec/maxUnavailable",
                0,
            ),
            col(
                "Allowed Disruptions",
                "integer",
                "@int:/status/disruptionsAllowed",
                0,
            ),
        ],
        // kube-apiserver's LimitRange table: the creation time, as a date
        ("", "limitranges") => vec![col("Created At", "date", "@created-at", 0)],
        ("", "resourcequotas") => vec![
            age(),
            col("Request", "string", "@quota:requests", 0),
            col("Limit", "string", "@quota:limits", 0),
        ],
        ("scheduling.k8s.io", "priorityclasses") => vec![
            col("Value", "integer", "@int:/value", 0),
            col("Global-Default", "boolean", "@bool:/globalDefault", 0),
            age(),
            col("PreemptionPolicy", "string", ".preemptionPolicy", 0),
        ],
        ("autoscaling", "horizontalpodautoscalers") => vec![
            col("Reference", "string", "@ref:/spec/scaleTargetRef", 0),
            col("Targets", "string", "@hpa-targets", 0),
            col("MinPods", "string", "@or-unset:/spec/minReplicas", 0),
            col("MaxPods", "integer", "@int:/spec/maxReplicas", 0),
            col("Replicas", "integer", "@int:/status/currentReplicas", 0),
        ],
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
        ("", "resourcequotas") => &["quota"],
        ("", "limitranges") => &["limits"],
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
        ("scheduling.k8s.io", "priorityclasses") => &["pc"],
        _ => &[],
    }
}
