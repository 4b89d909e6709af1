//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) for the kinds
//! kubectl's typed generators send that way (`kubectl create namespace|configmap|secret|
//! serviceaccount|service|deployment|job|cronjob|role|clusterrole|rolebinding|
//! clusterrolebinding|poddisruptionbudget|ingress`, `kubectl autoscale`). A table of field numbers per message
//! (k8s.io/api's generated.proto) turns the wire format into the JSON the rest of the
//! server stores. A field the table does not know is refused with 415, never dropped: no
//! silent data loss.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};

#[derive(Clone, Copy)]
enum Kind {
    Str,
    I64,
    Bool,
    Time,
    MapStr,
    MapBytes,
    /// `k8s.io.apimachinery.pkg.util.intstr.IntOrString`: a number or a string in JSON.
    IntOrString,
    /// `resource.Quantity` (its one field, `string`): a string in JSON.
    Quantity,
    /// `map<string, Quantity>`.
    MapQuantity,
    Msg(&'static [Field]),
    /// An embedded struct whose fields JSON puts in the parent (`json:",inline"`).
    Inline(&'static [Field]),
}

#[derive(Clone, Copy)]
struct Field {
    tag: u64,
    name: &'static str,
    kind: Kind,
    repeated: bool,
    /// A pointer in the Go type (or a field JSON never omits): sent only when set, so
    /// a zero value (`replicas: 0`, `false`, `{}`) is kept. Other fields arrive at their
    /// zero value when unset, which JSON omits.
    keep_zero: bool,
}

const fn f(tag: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        tag,
        name,
        kind,
        repeated: false,
        keep_zero: false,
    }
}

/// A pointer field: its zero value is a value.
const fn o(tag: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        keep_zero: true,
        ..f(tag, name, kind)
    }
}

const fn r(tag: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        repeated: true,
        ..f(tag, name, kind)
    }
}

const OWNER_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
    f(5, "apiVersion", Kind::Str),
    o(6, "controller", Kind::Bool),
    o(7, "blockOwnerDeletion", Kind::Bool),
];

const OBJECT_META: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "generateName", Kind::Str),
    f(3, "namespace", Kind::Str),
    f(4, "selfLink", Kind::Str),
    f(5, "uid", Kind::Str),
    f(6, "resourceVersion", Kind::Str),
    f(7, "generation", Kind::I64),
    f(8, "creationTimestamp", Kind::Time),
    f(9, "deletionTimestamp", Kind::Time),
    f(10, "deletionGracePeriodSeconds", Kind::I64),
    f(11, "labels", Kind::MapStr),
    f(12, "annotations", Kind::MapStr),
    r(13, "ownerReferences", Kind::Msg(OWNER_REFERENCE)),
    r(14, "finalizers", Kind::Str),
];

const NAMESPACE_SPEC: &[Field] = &[r(1, "finalizers", Kind::Str)];
const NAMESPACE_STATUS: &[Field] = &[f(1, "phase", Kind::Str)];
const NAMESPACE: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(NAMESPACE_SPEC)),
    f(3, "status", Kind::Msg(NAMESPACE_STATUS)),
];
const CONFIG_MAP: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "data", Kind::MapStr),
    f(3, "binaryData", Kind::MapBytes),
    o(4, "immutable", Kind::Bool),
];
const SECRET: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "data", Kind::MapBytes),
    f(3, "type", Kind::Str),
    f(4, "stringData", Kind::MapStr),
    o(5, "immutable", Kind::Bool),
];
const OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(2, "namespace", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
    f(5, "apiVersion", Kind::Str),
    f(6, "resourceVersion", Kind::Str),
    f(7, "fieldPath", Kind::Str),
];
const LOCAL_OBJECT_REFERENCE: &[Field] = &[f(1, "name", Kind::Str)];
const SERVICE_ACCOUNT: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    r(2, "secrets", Kind::Msg(OBJECT_REFERENCE)),
    r(3, "imagePullSecrets", Kind::Msg(LOCAL_OBJECT_REFERENCE)),
    o(4, "automountServiceAccountToken", Kind::Bool),
];

const BOUND_OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(2, "apiVersion", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
];
const TOKEN_REQUEST_SPEC: &[Field] = &[
    r(1, "audiences", Kind::Str),
    f(3, "boundObjectRef", Kind::Msg(BOUND_OBJECT_REFERENCE)),
    o(4, "expirationSeconds", Kind::I64),
];
const TOKEN_REQUEST_STATUS: &[Field] = &[
    f(1, "token", Kind::Str),
    f(2, "expirationTimestamp", Kind::Time),
];
const TOKEN_REQUEST: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(TOKEN_REQUEST_SPEC)),
    f(3, "status", Kind::Msg(TOKEN_REQUEST_STATUS)),
];
const RESOURCE_ATTRIBUTES: &[Field] = &[
    f(1, "namespace", Kind::Str),
    f(2, "verb", Kind::Str),
    f(3, "group", Kind::Str),
    f(4, "version", Kind::Str),
    f(5, "resource", Kind::Str),
    f(6, "subresource", Kind::Str),
    f(7, "name", Kind::Str),
];
const NON_RESOURCE_ATTRIBUTES: &[Field] = &[f(1, "path", Kind::Str), f(2, "verb", Kind::Str)];
const ACCESS_REVIEW_SPEC: &[Field] = &[
    f(1, "resourceAttributes", Kind::Msg(RESOURCE_ATTRIBUTES)),
    f(
        2,
        "nonResourceAttributes",
        Kind::Msg(NON_RESOURCE_ATTRIBUTES),
    ),
    f(3, "user", Kind::Str),
    r(4, "groups", Kind::Str),
    f(6, "uid", Kind::Str),
];
const ACCESS_REVIEW_STATUS: &[Field] = &[
    o(1, "allowed", Kind::Bool),
    f(2, "reason", Kind::Str),
    f(3, "evaluationError", Kind::Str),
    f(4, "denied", Kind::Bool),
];
/// SubjectAccessReview and SelfSubjectAccessReview (whose spec has fields 1 and 2 only).
const ACCESS_REVIEW: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(ACCESS_REVIEW_SPEC)),
    f(3, "status", Kind::Msg(ACCESS_REVIEW_STATUS)),
];

const SERVICE_PORT: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "protocol", Kind::Str),
    f(3, "port", Kind::I64),
    f(4, "targetPort", Kind::IntOrString),
    f(5, "nodePort", Kind::I64),
    f(6, "appProtocol", Kind::Str),
];
const CLIENT_IP_CONFIG: &[Field] = &[o(1, "timeoutSeconds", Kind::I64)];
const SESSION_AFFINITY_CONFIG: &[Field] = &[f(1, "clientIP", Kind::Msg(CLIENT_IP_CONFIG))];
const SERVICE_SPEC: &[Field] = &[
    r(1, "ports", Kind::Msg(SERVICE_PORT)),
    f(2, "selector", Kind::MapStr),
    f(3, "clusterIP", Kind::Str),
    f(4, "type", Kind::Str),
    r(5, "externalIPs", Kind::Str),
    f(7, "sessionAffinity", Kind::Str),
    f(8, "loadBalancerIP", Kind::Str),
    r(9, "loadBalancerSourceRanges", Kind::Str),
    f(10, "externalName", Kind::Str),
    f(11, "externalTrafficPolicy", Kind::Str),
    f(12, "healthCheckNodePort", Kind::I64),
    f(13, "publishNotReadyAddresses", Kind::Bool),
    f(
        14,
        "sessionAffinityConfig",
        Kind::Msg(SESSION_AFFINITY_CONFIG),
    ),
    f(17, "ipFamilyPolicy", Kind::Str),
    r(18, "clusterIPs", Kind::Str),
    r(19, "ipFamilies", Kind::Str),
    o(20, "allocateLoadBalancerNodePorts", Kind::Bool),
    f(21, "loadBalancerClass", Kind::Str),
    f(22, "internalTrafficPolicy", Kind::Str),
    f(23, "trafficDistribution", Kind::Str),
];
const LOAD_BALANCER_INGRESS: &[Field] = &[f(1, "ip", Kind::Str), f(2, "hostname", Kind::Str)];
const LOAD_BALANCER_STATUS: &[Field] = &[r(1, "ingress", Kind::Msg(LOAD_BALANCER_INGRESS))];
const SERVICE_STATUS: &[Field] = &[f(1, "loadBalancer", Kind::Msg(LOAD_BALANCER_STATUS))];
const SERVICE: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(SERVICE_SPEC)),
    f(3, "status", Kind::Msg(SERVICE_STATUS)),
];

const OBJECT_FIELD_SELECTOR: &[Field] =
    &[f(1, "apiVersion", Kind::Str), f(2, "fieldPath", Kind::Str)];
/// ConfigMapKeySelector and SecretKeySelector (LocalObjectReference inline).
const KEY_SELECTOR: &[Field] = &[
    f(
        1,
        "localObjectReference",
        Kind::Inline(LOCAL_OBJECT_REFERENCE),
    ),
    f(2, "key", Kind::Str),
    o(3, "optional", Kind::Bool),
];
const ENV_VAR_SOURCE: &[Field] = &[
    f(1, "fieldRef", Kind::Msg(OBJECT_FIELD_SELECTOR)),
    f(3, "configMapKeyRef", Kind::Msg(KEY_SELECTOR)),
    f(4, "secretKeyRef", Kind::Msg(KEY_SELECTOR)),
];
const ENV_VAR: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "value", Kind::Str),
    f(3, "valueFrom", Kind::Msg(ENV_VAR_SOURCE)),
];
const CONTAINER_PORT: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "hostPort", Kind::I64),
    f(3, "containerPort", Kind::I64),
    f(4, "protocol", Kind::Str),
    f(5, "hostIP", Kind::Str),
];
const RESOURCE_REQUIREMENTS: &[Field] = &[
    f(1, "limits", Kind::MapQuantity),
    f(2, "requests", Kind::MapQuantity),
];
const VOLUME_MOUNT: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "readOnly", Kind::Bool),
    f(3, "mountPath", Kind::Str),
    f(4, "subPath", Kind::Str),
];
const SECURITY_CONTEXT: &[Field] = &[
    o(2, "privileged", Kind::Bool),
    o(4, "runAsUser", Kind::I64),
    o(5, "runAsNonRoot", Kind::Bool),
    o(6, "readOnlyRootFilesystem", Kind::Bool),
    o(7, "allowPrivilegeEscalation", Kind::Bool),
    o(8, "runAsGroup", Kind::I64),
];
const CONTAINER: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "image", Kind::Str),
    r(3, "command", Kind::Str),
    r(4, "args", Kind::Str),
    f(5, "workingDir", Kind::Str),
    r(6, "ports", Kind::Msg(CONTAINER_PORT)),
    r(7, "env", Kind::Msg(ENV_VAR)),
    f(8, "resources", Kind::Msg(RESOURCE_REQUIREMENTS)),
    r(9, "volumeMounts", Kind::Msg(VOLUME_MOUNT)),
    f(13, "terminationMessagePath", Kind::Str),
    f(14, "imagePullPolicy", Kind::Str),
    f(15, "securityContext", Kind::Msg(SECURITY_CONTEXT)),
    f(16, "stdin", Kind::Bool),
    f(17, "stdinOnce", Kind::Bool),
    f(18, "tty", Kind::Bool),
    f(20, "terminationMessagePolicy", Kind::Str),
];
const KEY_TO_PATH: &[Field] = &[
    f(1, "key", Kind::Str),
    f(2, "path", Kind::Str),
    o(3, "mode", Kind::I64),
];
const EMPTY_DIR: &[Field] = &[f(1, "medium", Kind::Str), o(2, "sizeLimit", Kind::Quantity)];
const SECRET_VOLUME: &[Field] = &[
    f(1, "secretName", Kind::Str),
    r(2, "items", Kind::Msg(KEY_TO_PATH)),
    o(3, "defaultMode", Kind::I64),
    o(4, "optional", Kind::Bool),
];
const CONFIG_MAP_VOLUME: &[Field] = &[
    f(
        1,
        "localObjectReference",
        Kind::Inline(LOCAL_OBJECT_REFERENCE),
    ),
    r(2, "items", Kind::Msg(KEY_TO_PATH)),
    o(3, "defaultMode", Kind::I64),
    o(4, "optional", Kind::Bool),
];
const VOLUME_SOURCE: &[Field] = &[
    f(2, "emptyDir", Kind::Msg(EMPTY_DIR)),
    f(6, "secret", Kind::Msg(SECRET_VOLUME)),
    f(19, "configMap", Kind::Msg(CONFIG_MAP_VOLUME)),
];
const VOLUME: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "volumeSource", Kind::Inline(VOLUME_SOURCE)),
];
const TOLERATION: &[Field] = &[
    f(1, "key", Kind::Str),
    f(2, "operator", Kind::Str),
    f(3, "value", Kind::Str),
    f(4, "effect", Kind::Str),
    o(5, "tolerationSeconds", Kind::I64),
];
const POD_SECURITY_CONTEXT: &[Field] = &[
    o(2, "runAsUser", Kind::I64),
    o(3, "runAsNonRoot", Kind::Bool),
    r(4, "supplementalGroups", Kind::I64),
    o(5, "fsGroup", Kind::I64),
    o(6, "runAsGroup", Kind::I64),
    o(9, "fsGroupChangePolicy", Kind::Str),
];
const POD_SPEC: &[Field] = &[
    r(1, "volumes", Kind::Msg(VOLUME)),
    r(2, "containers", Kind::Msg(CONTAINER)),
    f(3, "restartPolicy", Kind::Str),
    o(4, "terminationGracePeriodSeconds", Kind::I64),
    o(5, "activeDeadlineSeconds", Kind::I64),
    f(6, "dnsPolicy", Kind::Str),
    f(7, "nodeSelector", Kind::MapStr),
    f(8, "serviceAccountName", Kind::Str),
    f(9, "serviceAccount", Kind::Str),
    f(10, "nodeName", Kind::Str),
    f(11, "hostNetwork", Kind::Bool),
    f(12, "hostPID", Kind::Bool),
    f(13, "hostIPC", Kind::Bool),
    f(14, "securityContext", Kind::Msg(POD_SECURITY_CONTEXT)),
    r(15, "imagePullSecrets", Kind::Msg(LOCAL_OBJECT_REFERENCE)),
    f(16, "hostname", Kind::Str),
    f(17, "subdomain", Kind::Str),
    f(19, "schedulerName", Kind::Str),
    r(20, "initContainers", Kind::Msg(CONTAINER)),
    o(21, "automountServiceAccountToken", Kind::Bool),
    r(22, "tolerations", Kind::Msg(TOLERATION)),
    f(24, "priorityClassName", Kind::Str),
    o(25, "priority", Kind::I64),
    o(27, "shareProcessNamespace", Kind::Bool),
    o(29, "runtimeClassName", Kind::Str),
    o(30, "enableServiceLinks", Kind::Bool),
];
/// What a client sends of a Pod's status: its scalar fields, at their zero values as a
/// rule (the create keeps no status a client sends).
const POD_STATUS: &[Field] = &[
    f(1, "phase", Kind::Str),
    f(3, "message", Kind::Str),
    f(4, "reason", Kind::Str),
    f(5, "hostIP", Kind::Str),
    f(6, "podIP", Kind::Str),
    f(9, "qosClass", Kind::Str),
    f(11, "nominatedNodeName", Kind::Str),
    f(14, "resize", Kind::Str),
    f(17, "observedGeneration", Kind::I64),
];
const POD: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(POD_SPEC)),
    f(3, "status", Kind::Msg(POD_STATUS)),
];
const POD_TEMPLATE_SPEC: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(POD_SPEC)),
];
const LABEL_SELECTOR_REQUIREMENT: &[Field] = &[
    f(1, "key", Kind::Str),
    f(2, "operator", Kind::Str),
    r(3, "values", Kind::Str),
];
const LABEL_SELECTOR: &[Field] = &[
    f(1, "matchLabels", Kind::MapStr),
    r(2, "matchExpressions", Kind::Msg(LABEL_SELECTOR_REQUIREMENT)),
];
const ROLLING_UPDATE_DEPLOYMENT: &[Field] = &[
    o(1, "maxUnavailable", Kind::IntOrString),
    o(2, "maxSurge", Kind::IntOrString),
];
const DEPLOYMENT_STRATEGY: &[Field] = &[
    f(1, "type", Kind::Str),
    f(2, "rollingUpdate", Kind::Msg(ROLLING_UPDATE_DEPLOYMENT)),
];
const DEPLOYMENT_SPEC: &[Field] = &[
    o(1, "replicas", Kind::I64),
    f(2, "selector", Kind::Msg(LABEL_SELECTOR)),
    f(3, "template", Kind::Msg(POD_TEMPLATE_SPEC)),
    f(4, "strategy", Kind::Msg(DEPLOYMENT_STRATEGY)),
    f(5, "minReadySeconds", Kind::I64),
    o(6, "revisionHistoryLimit", Kind::I64),
    f(7, "paused", Kind::Bool),
    o(9, "progressDeadlineSeconds", Kind::I64),
];
/// What a client sends of a Deployment's status: its counts, at zero as a rule.
const DEPLOYMENT_STATUS: &[Field] = &[
    f(1, "observedGeneration", Kind::I64),
    f(2, "replicas", Kind::I64),
    f(3, "updatedReplicas", Kind::I64),
    f(4, "availableReplicas", Kind::I64),
    f(5, "unavailableReplicas", Kind::I64),
    f(7, "readyReplicas", Kind::I64),
    o(8, "collisionCount", Kind::I64),
    o(9, "terminatingReplicas", Kind::I64),
];
const DEPLOYMENT: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(DEPLOYMENT_SPEC)),
    f(3, "status", Kind::Msg(DEPLOYMENT_STATUS)),
];

const JOB_SPEC: &[Field] = &[
    o(1, "parallelism", Kind::I64),
    o(2, "completions", Kind::I64),
    o(3, "activeDeadlineSeconds", Kind::I64),
    f(4, "selector", Kind::Msg(LABEL_SELECTOR)),
    o(5, "manualSelector", Kind::Bool),
    f(6, "template", Kind::Msg(POD_TEMPLATE_SPEC)),
    o(7, "backoffLimit", Kind::I64),
    o(8, "ttlSecondsAfterFinished", Kind::I64),
    o(9, "completionMode", Kind::Str),
    o(10, "suspend", Kind::Bool),
    o(12, "backoffLimitPerIndex", Kind::I64),
    o(13, "maxFailedIndexes", Kind::I64),
    o(14, "podReplacementPolicy", Kind::Str),
    o(15, "managedBy", Kind::Str),
];
/// What a client sends of a Job's status: its counts, at zero as a rule.
const JOB_STATUS: &[Field] = &[
    f(2, "startTime", Kind::Time),
    f(3, "completionTime", Kind::Time),
    f(4, "active", Kind::I64),
    f(5, "succeeded", Kind::I64),
    f(6, "failed", Kind::I64),
    f(7, "completedIndexes", Kind::Str),
    o(9, "ready", Kind::I64),
    o(10, "failedIndexes", Kind::Str),
    o(11, "terminating", Kind::I64),
];
const JOB: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(JOB_SPEC)),
    f(3, "status", Kind::Msg(JOB_STATUS)),
];
const JOB_TEMPLATE_SPEC: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(JOB_SPEC)),
];
const CRON_JOB_SPEC: &[Field] = &[
    f(1, "schedule", Kind::Str),
    o(2, "startingDeadlineSeconds", Kind::I64),
    f(3, "concurrencyPolicy", Kind::Str),
    o(4, "suspend", Kind::Bool),
    f(5, "jobTemplate", Kind::Msg(JOB_TEMPLATE_SPEC)),
    o(6, "successfulJobsHistoryLimit", Kind::I64),
    o(7, "failedJobsHistoryLimit", Kind::I64),
    o(8, "timeZone", Kind::Str),
];
const CRON_JOB_STATUS: &[Field] = &[
    r(1, "active", Kind::Msg(OBJECT_REFERENCE)),
    f(4, "lastScheduleTime", Kind::Time),
    f(5, "lastSuccessfulTime", Kind::Time),
];
const CRON_JOB: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(CRON_JOB_SPEC)),
    f(3, "status", Kind::Msg(CRON_JOB_STATUS)),
];

const POLICY_RULE: &[Field] = &[
    r(1, "verbs", Kind::Str),
    r(2, "apiGroups", Kind::Str),
    r(3, "resources", Kind::Str),
    r(4, "resourceNames", Kind::Str),
    r(5, "nonResourceURLs", Kind::Str),
];
const AGGREGATION_RULE: &[Field] = &[r(1, "clusterRoleSelectors", Kind::Msg(LABEL_SELECTOR))];
const ROLE: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    r(2, "rules", Kind::Msg(POLICY_RULE)),
];
const CLUSTER_ROLE: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    r(2, "rules", Kind::Msg(POLICY_RULE)),
    f(3, "aggregationRule", Kind::Msg(AGGREGATION_RULE)),
];
const SUBJECT: &[Field] = &[
    o(1, "kind", Kind::Str),
    f(2, "apiGroup", Kind::Str),
    o(3, "name", Kind::Str),
    f(4, "namespace", Kind::Str),
];
/// Go's JSON never omits a RoleRef's fields.
const ROLE_REF: &[Field] = &[
    o(1, "apiGroup", Kind::Str),
    o(2, "kind", Kind::Str),
    o(3, "name", Kind::Str),
];
/// RoleBinding and ClusterRoleBinding.
const BINDING: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    r(2, "subjects", Kind::Msg(SUBJECT)),
    f(3, "roleRef", Kind::Msg(ROLE_REF)),
];

/// `metav1.Condition`.
const CONDITION: &[Field] = &[
    f(1, "type", Kind::Str),
    f(2, "status", Kind::Str),
    f(3, "observedGeneration", Kind::I64),
    f(4, "lastTransitionTime", Kind::Time),
    f(5, "reason", Kind::Str),
    f(6, "message", Kind::Str),
];
const PDB_SPEC: &[Field] = &[
    o(1, "minAvailable", Kind::IntOrString),
    o(2, "selector", Kind::Msg(LABEL_SELECTOR)),
    o(3, "maxUnavailable", Kind::IntOrString),
    o(4, "unhealthyPodEvictionPolicy", Kind::Str),
];
/// What a client sends of a PodDisruptionBudget's status: its counts, which Go's JSON
/// always shows.
const PDB_STATUS: &[Field] = &[
    f(1, "observedGeneration", Kind::I64),
    o(3, "disruptionsAllowed", Kind::I64),
    o(4, "currentHealthy", Kind::I64),
    o(5, "desiredHealthy", Kind::I64),
    o(6, "expectedPods", Kind::I64),
    r(7, "conditions", Kind::Msg(CONDITION)),
];
/// `core/v1` ScopedResourceSelectorRequirement and ScopeSelector.
const SCOPED_REQUIREMENT: &[Field] = &[
    f(1, "scopeName", Kind::Str),
    f(2, "operator", Kind::Str),
    r(3, "values", Kind::Str),
];
const SCOPE_SELECTOR: &[Field] = &[r(1, "matchExpressions", Kind::Msg(SCOPED_REQUIREMENT))];
const RESOURCE_QUOTA_SPEC: &[Field] = &[
    f(1, "hard", Kind::MapQuantity),
    r(2, "scopes", Kind::Str),
    o(3, "scopeSelector", Kind::Msg(SCOPE_SELECTOR)),
];
const RESOURCE_QUOTA_STATUS: &[Field] = &[
    f(1, "hard", Kind::MapQuantity),
    f(2, "used", Kind::MapQuantity),
];
/// `core/v1` ResourceQuota.
const RESOURCE_QUOTA: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(RESOURCE_QUOTA_SPEC)),
    f(3, "status", Kind::Msg(RESOURCE_QUOTA_STATUS)),
];
/// `scheduling/v1` PriorityClass.
const PRIORITY_CLASS: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "value", Kind::I64),
    o(3, "globalDefault", Kind::Bool),
    o(4, "description", Kind::Str),
    o(5, "preemptionPolicy", Kind::Str),
];
const PDB: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(PDB_SPEC)),
    f(3, "status", Kind::Msg(PDB_STATUS)),
];

/// `core/v1` TypedLocalObjectReference.
const TYPED_LOCAL_OBJECT_REFERENCE: &[Field] = &[
    o(1, "apiGroup", Kind::Str),
    o(2, "kind", Kind::Str),
    o(3, "name", Kind::Str),
];
const SERVICE_BACKEND_PORT: &[Field] = &[f(1, "name", Kind::Str), f(2, "number", Kind::I64)];
const INGRESS_SERVICE_BACKEND: &[Field] = &[
    o(1, "name", Kind::Str),
    f(2, "port", Kind::Msg(SERVICE_BACKEND_PORT)),
];
const INGRESS_BACKEND: &[Field] = &[
    f(3, "resource", Kind::Msg(TYPED_LOCAL_OBJECT_REFERENCE)),
    f(4, "service", Kind::Msg(INGRESS_SERVICE_BACKEND)),
];
const HTTP_INGRESS_PATH: &[Field] = &[
    f(1, "path", Kind::Str),
    f(2, "backend", Kind::Msg(INGRESS_BACKEND)),
    o(3, "pathType", Kind::Str),
];
const HTTP_INGRESS_RULE_VALUE: &[Field] = &[r(1, "paths", Kind::Msg(HTTP_INGRESS_PATH))];
const INGRESS_RULE_VALUE: &[Field] = &[f(1, "http", Kind::Msg(HTTP_INGRESS_RULE_VALUE))];
const INGRESS_RULE: &[Field] = &[
    f(1, "host", Kind::Str),
    f(2, "ingressRuleValue", Kind::Inline(INGRESS_RULE_VALUE)),
];
const INGRESS_TLS: &[Field] = &[r(1, "hosts", Kind::Str), f(2, "secretName", Kind::Str)];
const INGRESS_SPEC: &[Field] = &[
    f(1, "defaultBackend", Kind::Msg(INGRESS_BACKEND)),
    r(2, "tls", Kind::Msg(INGRESS_TLS)),
    r(3, "rules", Kind::Msg(INGRESS_RULE)),
    o(4, "ingressClassName", Kind::Str),
];
const INGRESS_PORT_STATUS: &[Field] = &[
    o(1, "port", Kind::I64),
    o(2, "protocol", Kind::Str),
    o(3, "error", Kind::Str),
];
const INGRESS_LOAD_BALANCER_INGRESS: &[Field] = &[
    f(1, "ip", Kind::Str),
    f(2, "hostname", Kind::Str),
    r(4, "ports", Kind::Msg(INGRESS_PORT_STATUS)),
];
const INGRESS_LOAD_BALANCER_STATUS: &[Field] =
    &[r(1, "ingress", Kind::Msg(INGRESS_LOAD_BALANCER_INGRESS))];
const INGRESS_STATUS: &[Field] = &[f(
    1,
    "loadBalancer",
    Kind::Msg(INGRESS_LOAD_BALANCER_STATUS),
)];
const INGRESS: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(INGRESS_SPEC)),
    f(3, "status", Kind::Msg(INGRESS_STATUS)),
];

/// `authentication/v1` UserInfo (what a client sends of it: `extra` is refused).
const USER_INFO: &[Field] = &[
    f(1, "username", Kind::Str),
    f(2, "uid", Kind::Str),
    r(3, "groups", Kind::Str),
];
const SELF_SUBJECT_REVIEW_STATUS: &[Field] = &[f(1, "userInfo", Kind::Msg(USER_INFO))];
const SELF_SUBJECT_REVIEW: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "status", Kind::Msg(SELF_SUBJECT_REVIEW_STATUS)),
];
const RULES_REVIEW_SPEC: &[Field] = &[f(1, "namespace", Kind::Str)];
const RESOURCE_RULE: &[Field] = &[
    r(1, "verbs", Kind::Str),
    r(2, "apiGroups", Kind::Str),
    r(3, "resources", Kind::Str),
    r(4, "resourceNames", Kind::Str),
];
const NON_RESOURCE_RULE: &[Field] = &[r(1, "verbs", Kind::Str), r(2, "nonResourceURLs", Kind::Str)];
const RULES_REVIEW_STATUS: &[Field] = &[
    r(1, "resourceRules", Kind::Msg(RESOURCE_RULE)),
    r(2, "nonResourceRules", Kind::Msg(NON_RESOURCE_RULE)),
    o(3, "incomplete", Kind::Bool),
    f(4, "evaluationError", Kind::Str),
];
const RULES_REVIEW: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(RULES_REVIEW_SPEC)),
    f(3, "status", Kind::Msg(RULES_REVIEW_STATUS)),
];

const CROSS_VERSION_OBJECT_REFERENCE: &[Field] = &[
    o(1, "kind", Kind::Str),
    o(2, "name", Kind::Str),
    f(3, "apiVersion", Kind::Str),
];
const METRIC_TARGET: &[Field] = &[
    o(1, "type", Kind::Str),
    o(2, "value", Kind::Quantity),
    o(3, "averageValue", Kind::Quantity),
    o(4, "averageUtilization", Kind::I64),
];
const METRIC_IDENTIFIER: &[Field] = &[
    o(1, "name", Kind::Str),
    o(2, "selector", Kind::Msg(LABEL_SELECTOR)),
];
const OBJECT_METRIC_SOURCE: &[Field] = &[
    f(
        1,
        "describedObject",
        Kind::Msg(CROSS_VERSION_OBJECT_REFERENCE),
    ),
    f(2, "target", Kind::Msg(METRIC_TARGET)),
    f(3, "metric", Kind::Msg(METRIC_IDENTIFIER)),
];
/// PodsMetricSource and ExternalMetricSource.
const METRIC_SOURCE: &[Field] = &[
    f(1, "metric", Kind::Msg(METRIC_IDENTIFIER)),
    f(2, "target", Kind::Msg(METRIC_TARGET)),
];
const RESOURCE_METRIC_SOURCE: &[Field] = &[
    o(1, "name", Kind::Str),
    f(2, "target", Kind::Msg(METRIC_TARGET)),
];
const CONTAINER_RESOURCE_METRIC_SOURCE: &[Field] = &[
    o(1, "name", Kind::Str),
    f(2, "target", Kind::Msg(METRIC_TARGET)),
    o(3, "container", Kind::Str),
];
const METRIC_SPEC: &[Field] = &[
    o(1, "type", Kind::Str),
    o(2, "object", Kind::Msg(OBJECT_METRIC_SOURCE)),
    o(3, "pods", Kind::Msg(METRIC_SOURCE)),
    o(4, "resource", Kind::Msg(RESOURCE_METRIC_SOURCE)),
    o(5, "external", Kind::Msg(METRIC_SOURCE)),
    o(
        7,
        "containerResource",
        Kind::Msg(CONTAINER_RESOURCE_METRIC_SOURCE),
    ),
];
/// What a client sends of an autoscaling/v2 HorizontalPodAutoscaler's spec (a
/// `behavior` is refused with 415, never dropped).
const HPA_SPEC: &[Field] = &[
    f(
        1,
        "scaleTargetRef",
        Kind::Msg(CROSS_VERSION_OBJECT_REFERENCE),
    ),
    o(2, "minReplicas", Kind::I64),
    o(3, "maxReplicas", Kind::I64),
    r(4, "metrics", Kind::Msg(METRIC_SPEC)),
];
/// What a client sends of its status: the counts (a client sends no metrics or
/// conditions).
const HPA_STATUS: &[Field] = &[
    o(1, "observedGeneration", Kind::I64),
    o(2, "lastScaleTime", Kind::Time),
    f(3, "currentReplicas", Kind::I64),
    o(4, "desiredReplicas", Kind::I64),
];
const HPA: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(HPA_SPEC)),
    f(3, "status", Kind::Msg(HPA_STATUS)),
];

/// The kinds whose protobuf bodies kubesim decodes: (apiVersion, kind, message).
const SCHEMAS: &[(&str, &str, &[Field])] = &[
    ("v1", "Namespace", NAMESPACE),
    ("v1", "ConfigMap", CONFIG_MAP),
    ("v1", "Secret", SECRET),
    ("v1", "ServiceAccount", SERVICE_ACCOUNT),
    ("v1", "Service", SERVICE),
    ("v1", "Pod", POD),
    ("v1", "ResourceQuota", RESOURCE_QUOTA),
    ("apps/v1", "Deployment", DEPLOYMENT),
    ("batch/v1", "Job", JOB),
    ("batch/v1", "CronJob", CRON_JOB),
    ("rbac.authorization.k8s.io/v1", "Role", ROLE),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", CLUSTER_ROLE),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", BINDING),
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        BINDING,
    ),
    ("policy/v1", "PodDisruptionBudget", PDB),
    ("scheduling.k8s.io/v1", "PriorityClass", PRIORITY_CLASS),
    ("networking.k8s.io/v1", "Ingress", INGRESS),
    ("autoscaling/v2", "HorizontalPodAutoscaler", HPA),
    ("authentication.k8s.io/v1", "TokenRequest", TOKEN_REQUEST),
    (
        "authentication.k8s.io/v1",
        "SelfSubjectReview",
        SELF_SUBJECT_REVIEW,
    ),
    (
        "authorization.k8s.io/v1",
        "SelfSubjectRulesReview",
        RULES_REVIEW,
    ),
    (
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        ACCESS_REVIEW,
    ),
    (
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        ACCESS_REVIEW,
    ),
];

fn schema(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    SCHEMAS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
        .map(|(_, _, fields)| *fields)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn malformed() -> ApiError {
    ApiError::bad_request("the protobuf request body is malformed")
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> ApiResult<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or_else(malformed)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed())
    }

    fn bytes(&mut self) -> ApiResult<&'a [u8]> {
        let n = usize::try_from(self.varint()?).map_err(|_| malformed())?;
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(malformed)?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }
}

fn utf8(b: &[u8]) -> ApiResult<String> {
    String::from_utf8(b.to_vec())
        .map_err(|_| ApiError::bad_request("a protobuf string field is not UTF-8"))
}

/// One entry of a `map<string, V>`: V a string, bytes (base64 in JSON) or a Quantity.
fn map_entry(b: &[u8], kind: Kind) -> ApiResult<(String, Value)> {
    let mut rd = Reader { buf: b, pos: 0 };
    let (mut k, mut v) = (String::new(), json!(""));
    while !rd.done() {
        let key = rd.varint()?;
        let data = rd.bytes()?;
        match (key >> 3, kind) {
            (1, _) => k = utf8(data)?,
            (2, Kind::MapBytes) => {
                v = json!(base64::engine::general_purpose::STANDARD.encode(data))
            }
            (2, Kind::MapQuantity) => v = quantity(data)?,
            (2, _) => v = json!(utf8(data)?),
            _ => return Err(malformed()),
        }
    }
    Ok((k, v))
}

/// A `resource.Quantity` message (field 1, its string form) as JSON.
fn quantity(b: &[u8]) -> ApiResult<Value> {
    let mut rd = Reader { buf: b, pos: 0 };
    let mut q = String::new();
    while !rd.done() {
        let key = rd.varint()?;
        match (key >> 3, key & 7) {
            (1, 2) => q = utf8(rd.bytes()?)?,
            _ => return Err(malformed()),
        }
    }
    Ok(json!(q))
}

fn time(b: &[u8]) -> ApiResult<Value> {
    let mut rd = Reader { buf: b, pos: 0 };
    let mut secs = 0i64;
    while !rd.done() {
        let key = rd.varint()?;
        let v = rd.varint()?;
        if key >> 3 == 1 {
            secs = v as i64;
        }
    }
    if secs == 0 {
        return Ok(Value::Null);
    }
    let ts = jiff::Timestamp::from_second(secs).map_err(|_| malformed())?;
    Ok(json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn message(buf: &[u8], fields: &[Field], what: &str) -> ApiResult<Map<String, Value>> {
    let mut out = Map::new();
    let mut rd = Reader { buf, pos: 0 };
    while !rd.done() {
        let key = rd.varint()?;
        let (tag, wire) = (key >> 3, key & 7);
        let Some(field) = fields.iter().find(|fl| fl.tag == tag) else {
            return Err(ApiError::unsupported_media(
                "application/vnd.kubernetes.protobuf",
                &["application/json", "application/yaml"],
            )
            .with_message(format!("kubesim cannot decode protobuf field {tag} of {what}: send this object as JSON or YAML (kubectl create -f / apply)")));
        };
        let value = match (field.kind, wire) {
            (Kind::I64, 0) => json!(rd.varint()? as i64),
            (Kind::Bool, 0) => json!(rd.varint()? != 0),
            (Kind::Str, 2) => json!(utf8(rd.bytes()?)?),
            (Kind::Time, 2) => time(rd.bytes()?)?,
            (Kind::Msg(sub), 2) => Value::Object(message(rd.bytes()?, sub, field.name)?),
            (Kind::IntOrString, 2) => int_or_string(rd.bytes()?)?,
            (Kind::Quantity, 2) => quantity(rd.bytes()?)?,
            (Kind::Inline(sub), 2) => {
                out.extend(message(rd.bytes()?, sub, field.name)?);
                continue;
            }
            (Kind::MapStr | Kind::MapBytes | Kind::MapQuantity, 2) => {
                let (k, v) = map_entry(rd.bytes()?, field.kind)?;
                let m = out
                    .entry(field.name)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(m) = m.as_object_mut() {
                    m.insert(k, v);
                }
                continue;
            }
            _ => return Err(malformed()),
        };
        if field.repeated {
            if let Some(a) = out
                .entry(field.name)
                .or_insert_with(|| json!([]))
                .as_array_mut()
            {
                a.push(value);
            }
            continue;
        }
        // proto2 optional scalars arrive set to their zero value; JSON omits them, unless
        // the field is a pointer (sent only when set). A message is on the wire when it
        // is set (a pointer) or always (a struct), and JSON shows an empty struct as {}
        let empty = match &value {
            Value::Null => true,
            _ if field.keep_zero => false,
            Value::String(s) => s.is_empty(),
            Value::Number(n) => n.as_i64() == Some(0),
            Value::Bool(b) => !b,
            _ => false,
        };
        if !empty {
            out.insert(field.name.to_string(), value);
        }
    }
    Ok(out)
}

/// An `IntOrString` message (type 0: `intVal`, type 1: `strVal`) as JSON.
fn int_or_string(buf: &[u8]) -> ApiResult<Value> {
    let (mut is_str, mut int, mut text) = (false, 0i64, String::new());
    let mut rd = Reader { buf, pos: 0 };
    while !rd.done() {
        let key = rd.varint()?;
        match (key >> 3, key & 7) {
            (1, 0) => is_str = rd.varint()? == 1,
            (2, 0) => int = rd.varint()? as i32 as i64,
            (3, 2) => text = utf8(rd.bytes()?)?,
            _ => return Err(malformed()),
        }
    }
    Ok(if is_str { json!(text) } else { json!(int) })
}

/// Decodes a `k8s\0` protobuf envelope into the object's JSON.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| ApiError::bad_request("a protobuf body must start with the k8s\\0 magic"))?;
    let mut rd = Reader { buf: rest, pos: 0 };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while !rd.done() {
        let key = rd.varint()?;
        let data = rd.bytes()?;
        match key >> 3 {
            1 => {
                let mut tm = Reader { buf: data, pos: 0 };
                while !tm.done() {
                    let k = tm.varint()?;
                    let v = utf8(tm.bytes()?)?;
                    match k >> 3 {
                        1 => api_version = v,
                        2 => kind = v,
                        _ => {}
                    }
                }
            }
            2 => raw = data,
            _ => {}
        }
    }
    let Some(fields) = schema(&api_version, &kind) else {
        let known: Vec<String> = SCHEMAS.iter().map(|(v, k, _)| format!("{v} {k}")).collect();
        return Err(ApiError::unsupported_media("application/vnd.kubernetes.protobuf", &["application/json", "application/yaml"])
            .with_message(format!("kubesim decodes protobuf bodies only for {}, not {api_version} {kind}: send it as JSON or YAML (kubectl create -f / apply)", known.join(", "))));
    };
    let mut obj = message(raw, fields, &kind)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

impl ApiError {
    /// The same error with another message.
    pub fn with_message(mut self, message: String) -> Self {
        self.message = message;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_or_string_is_a_number_or_a_string() {
        // intVal 8080 (type 0 omitted), and strVal "https" with type 1
        assert_eq!(int_or_string(&[0x10, 0x90, 0x3f]).unwrap(), json!(8080));
        let mut named = vec![0x08, 0x01, 0x1a, 5];
        named.extend(b"https");
        assert_eq!(int_or_string(&named).unwrap(), json!("https"));
        assert_eq!(int_or_string(&[0x20, 0x01]).unwrap_err().code, 400);
    }

    #[test]
    fn decodes_what_kubectl_create_namespace_sends() {
        // captured from `kubectl create namespace tmp1 -v=9` (kubectl v1.37)
        let body: &[u8] = &[
            0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x4e, 0x61,
            0x6d, 0x65, 0x73, 0x70, 0x61, 0x63, 0x65, 0x12, 0x1c, 0x0a, 0x14, 0x0a, 0x04, 0x74,
            0x6d, 0x70, 0x31, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38,
            0x00, 0x42, 0x00, 0x12, 0x00, 0x1a, 0x02, 0x0a, 0x00, 0x1a, 0x00, 0x22, 0x00,
        ];
        let v = decode(body).unwrap();
        assert_eq!(v["kind"], "Namespace");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["metadata"], json!({"name": "tmp1"}));
    }

    fn enc_str(tag: u64, s: &[u8]) -> Vec<u8> {
        let mut v = vec![(tag << 3 | 2) as u8, s.len() as u8];
        v.extend_from_slice(s);
        v
    }

    /// A Pod as a typed client sends it: a container with resources (Quantity maps), an
    /// emptyDir volume (VolumeSource inline in JSON), zero scalars left out, an empty
    /// struct kept as {}, a pointer's zero kept.
    #[test]
    fn a_pod_with_resources_and_an_empty_dir() {
        let msg = |parts: &[Vec<u8>]| parts.concat();
        let quantity = |q: &[u8]| enc_str(1, q);
        let limit = msg(&[enc_str(1, b"cpu"), enc_str(2, &quantity(b"200m"))]);
        let resources = enc_str(1, &limit);
        let container = msg(&[
            enc_str(1, b"c"),
            enc_str(2, b"busybox"),
            enc_str(8, &resources),
            vec![0x80, 0x01, 0], // stdin (field 16, a two-byte key): false, not in JSON
        ]);
        let volume = msg(&[enc_str(1, b"scratch"), enc_str(2, &enc_str(2, b""))]);
        let spec = msg(&[
            enc_str(1, &volume),
            enc_str(2, &container),
            vec![4 << 3, 0], // terminationGracePeriodSeconds: 0, a pointer: kept
        ]);
        let pod = msg(&[
            enc_str(1, &enc_str(1, b"p")),
            enc_str(2, &spec),
            enc_str(3, b""),
        ]);
        let tm = msg(&[enc_str(1, b"v1"), enc_str(2, b"Pod")]);
        let body = msg(&[b"k8s\0".to_vec(), enc_str(1, &tm), enc_str(2, &pod)]);
        let v = decode(&body).unwrap();
        assert_eq!(
            v["spec"],
            json!({"volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "200m"}}}],
                "terminationGracePeriodSeconds": 0})
        );
        assert_eq!(v["status"], json!({}));
    }

    #[test]
    fn configmap_maps_and_unknown_fields() {
        let mut entry = enc_str(1, b"k");
        entry.extend(enc_str(2, b"v"));
        let mut meta = enc_str(1, b"cm");
        meta.extend(enc_str(3, b"default"));
        let mut cm = enc_str(1, &meta);
        cm.extend(enc_str(2, &entry));
        let mut tm = enc_str(1, b"v1");
        tm.extend(enc_str(2, b"ConfigMap"));
        let mut body = b"k8s\0".to_vec();
        body.extend(enc_str(1, &tm));
        body.extend(enc_str(2, &cm));
        let v = decode(&body).unwrap();
        assert_eq!(v["data"], json!({"k": "v"}));
        assert_eq!(v["metadata"]["namespace"], "default");
        // a field the table does not know is refused, not dropped
        let mut bad = cm.clone();
        bad.extend(enc_str(9, b"x"));
        let mut body = b"k8s\0".to_vec();
        body.extend(enc_str(1, &tm));
        body.extend(enc_str(2, &bad));
        assert_eq!(decode(&body).unwrap_err().code, 415);
        assert_eq!(decode(b"nope").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\x0a\xff").unwrap_err().code, 400);
    }
}
