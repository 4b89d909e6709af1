//! From a member's object to a [`Record`], and from a stored object back to a result.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Gvr, Key, Record};
use crate::CLUSTER_ANNOTATION;

/// What the store keeps as a record's version: its resourceVersion, with this suffix
/// for names-only copies, so that a type switching between whole objects and names
/// only is a change that gets written (same resourceVersion, other form).
const NAMES_ONLY: &str = "/names";

/// The suffix of names-only copies stored before they lost their annotations (they kept
/// `kubectl.kubernetes.io/last-applied-configuration`, i.e. the whole object): the
/// store's migration strips them as it opens (`schema`); read as the resourceVersion it
/// ends, and never equal to a new copy's stored version.
const NAMES_ONLY_WITH_ANNOTATIONS: &str = "/metadata";

/// The stored version of an object at `resource_version`, whole or names only.
pub fn stored_version(resource_version: &str, metadata_only: bool) -> String {
    if metadata_only {
        format!("{resource_version}{NAMES_ONLY}")
    } else {
        resource_version.to_string()
    }
}

/// The resourceVersion part of a stored version.
pub fn resource_version_of(stored: &str) -> &str {
    stored
        .strip_suffix(NAMES_ONLY)
        .or_else(|| stored.strip_suffix(NAMES_ONLY_WITH_ANNOTATIONS))
        .unwrap_or(stored)
}

/// Whether a names-only copy keeps this metadata field. Annotations do not: they are
/// free text of up to 256 KiB that tools fill with whole objects
/// (`kubectl.kubernetes.io/last-applied-configuration` after a client-side `kubectl
/// apply`, kapp's `kapp.k14s.io/original`, wrangler's `objectset.rio.cattle.io/applied`),
/// so a Secret or ConfigMap indexed as names only would serve its contents through
/// them, and no list of the annotations that do can be complete. Labels stay (their
/// values are 63 characters at most, and selectors need them).
fn names_only_keeps(field: &str) -> bool {
    !matches!(field, "managedFields" | "annotations")
}

/// The metadata fields a record takes, read from an object's JSON text without building
/// the object. Fields of another JSON type than the API's fail the read, and the record
/// is then made from the parsed object ([`Record::from_value`]'s rules), so both reads
/// index the same things.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaView<'a> {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    creation_timestamp: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    /// Each an object (checked: serde reads a struct from an array too).
    #[serde(borrow, default)]
    owner_references: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct OwnerView {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    controller: Option<bool>,
}

/// Whether `raw` is a JSON object (serde reads a struct from an array too).
fn is_object(raw: &RawValue) -> bool {
    raw.get().starts_with('{')
}

/// Whether JSON text has an escape that the fast read would pass on unchecked: a NUL
/// (both stores refuse it) or a UTF-16 surrogate (a lone one is not Unicode).
fn needs_whole_read(text: &str) -> bool {
    text.match_indices("\\u").any(|(i, _)| {
        let hex = text.as_bytes().get(i + 2..i + 6).unwrap_or_default();
        hex == b"0000"
            || matches!(
                hex,
                [b'd' | b'D', b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F', ..]
            )
    })
}

/// Which object a member's JSON text is (key and uid), and at which resourceVersion,
/// read without building the object (`None` if its metadata has other types than the
/// API's).
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
}

#[derive(Deserialize)]
struct ListedTop<'a> {
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
}

impl Listed {
    /// Reads `text`: `None` unless it is an object whose metadata (if set) is one.
    pub fn read(text: &str) -> Option<Self> {
        if !text.starts_with('{') {
            return None;
        }
        match serde_json::from_str::<ListedTop>(text).ok()?.metadata {
            None => Some(Listed::default()),
            Some(m) if is_object(m) => serde_json::from_str(m.get()).ok(),
            Some(_) => None,
        }
    }
    /// The same of a parsed object: a field that is not a string is unset.
    pub fn of_value(object: &Value) -> Self {
        let s = |k: &str| {
            object
                .get("metadata")
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(String::from)
        };
        Listed {
            name: s("name"),
            namespace: s("namespace"),
            uid: s("uid"),
            resource_version: s("resourceVersion"),
        }
    }
    /// `metadata.namespace` (`""` when unset).
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }
    /// `metadata.name` (`""` when unset).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }
    /// `metadata.uid` (`""` when unset, as a [`Record`]'s).
    pub fn uid(&self) -> &str {
        self.uid.as_deref().unwrap_or_default()
    }
    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
}

/// Whether a key comes twice.
fn has_duplicates(members: &[(Cow<'_, str>, &RawValue)]) -> bool {
    members
        .iter()
        .enumerate()
        .any(|(i, (k, _))| members[..i].iter().any(|(other, _)| other == k))
}

/// A JSON object's members in their order, values unread.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Members<'a>, M::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(8));
                while let Some(entry) = m.next_entry::<Cow<'a, str>, &'a RawValue>()? {
                    out.push(entry);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// Appends `"key":value` (a comma first unless `out` ends an opening brace).
fn member(out: &mut String, key: &str, value: &str) {
    if !out.ends_with('{') {
        out.push(',');
    }
    push_json_string(out, key);
    out.push(':');
    out.push_str(value);
}

/// Appends `s` as a JSON string: as it is, quoted, when nothing in it needs escaping
/// (every key and type name the API server sends), else through serde_json.
fn push_json_string(out: &mut String, s: &str) {
    if s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(&Value::from(s).to_string());
    } else {
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
}

/// `text` read whole as the object [`Record::from_json`] stores: `api_version` and
/// `kind` first, then `metadata`, then the other fields in their order (`None` unless
/// it is a JSON object).
fn whole_object((api_version, kind): (&str, &str), text: &str) -> Option<Value> {
    let Ok(Value::Object(mut data)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let mut fields = Map::new();
    fields.insert("apiVersion".into(), api_version.into());
    fields.insert("kind".into(), kind.into());
    if let Some(m) = data.shift_remove("metadata") {
        fields.insert("metadata".into(), m);
    }
    fields.extend(
        data.into_iter()
            .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind")),
    );
    Some(Value::Object(fields))
}

/// Removes NUL characters from every string and key: PostgreSQL's jsonb and text refuse
/// them, and both stores must hold the same thing.
fn without_nul(v: &mut Value) {
    match v {
        Value::String(s) if s.contains('\0') => *s = s.replace('\0', ""),
        Value::Array(a) => a.iter_mut().for_each(without_nul),
        Value::Object(o) if o.keys().any(|k| k.contains('\0')) => {
            let old = std::mem::take(o);
            for (k, mut x) in old {
                without_nul(&mut x);
                o.insert(k.replace('\0', ""), x);
            }
        }
        Value::Object(o) => o.values_mut().for_each(without_nul),
        _ => {}
    }
}

impl Record {
    /// The record of an object of `gvr` in `cluster`: without `managedFields` (and with
    /// `metadata_only`, without anything but apiVersion, kind and metadata, and without
    /// annotations: [`names_only_keeps`]); the owner is
    /// the controller owner reference, else the first. `None` without a name.
    pub fn from_object(
        cluster: &str,
        gvr: &Gvr,
        obj: &Value,
        metadata_only: bool,
    ) -> Option<Record> {
        Record::from_value(cluster, gvr, obj.clone(), metadata_only)
    }

    /// [`Record::from_object`], taking the object (the indexer's: no copy of it is made).
    pub fn from_value(
        cluster: &str,
        gvr: &Gvr,
        mut object: Value,
        metadata_only: bool,
    ) -> Option<Record> {
        let meta = object.get("metadata")?;
        let s = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or_default();
        let name = s("name");
        if name.is_empty() {
            return None;
        }
        let owners = meta
            .get("ownerReferences")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let owner = owners
            .iter()
            .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
            .or_else(|| owners.first());
        let labels = meta
            .get("labels")
            .and_then(Value::as_object)
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| Some((k.replace('\0', ""), v.as_str()?.replace('\0', ""))))
                    .collect()
            })
            .unwrap_or_default();
        let mut record = Record {
            cluster: cluster.to_string(),
            gvr: gvr.clone(),
            namespace: s("namespace").to_string(),
            name: name.to_string(),
            uid: s("uid").to_string(),
            resource_version: stored_version(s("resourceVersion"), metadata_only),
            owner_uid: owner
                .and_then(|o| o.get("uid"))
                .and_then(Value::as_str)
                .map(String::from),
            created_at: s("creationTimestamp")
                .parse::<jiff::Timestamp>()
                .ok()
                .map(|t| t.as_millisecond()),
            labels,
            object: String::new(),
        };
        trim(&mut object, metadata_only);
        // NULs are rare: the JSON text says whether there is one (serde_json writes it
        // `\u0000`; a false alarm, the six characters in a string, only costs a walk)
        record.object = object.to_string();
        if record.object.contains("\\u0000") {
            without_nul(&mut object);
            record.object = object.to_string();
        }
        Some(record)
    }

    /// The record of a member's object from its JSON `text` as the member sent it (a
    /// list item or a watch event's object), with the type's `api_version` and `kind`
    /// first (list items lack them), then `metadata`, then the other fields in their
    /// order: [`Record::from_value`]'s record, without building the object. The
    /// object's fields are copied as text; only its metadata is read (its members written
    /// again, without `managedFields`). Text the API server would not send (metadata fields
    /// of another type, NUL characters) is read as a whole object instead. `None`
    /// without a name, or when `text` is not a JSON object.
    pub fn from_json(
        cluster: &str,
        gvr: &Gvr,
        (api_version, kind): (&str, &str),
        text: &str,
        metadata_only: bool,
    ) -> Option<Record> {
        if !needs_whole_read(text)
            && let Some(r) = Self::from_text(cluster, gvr, (api_version, kind), text, metadata_only)
        {
            return r;
        }
        let object = whole_object((api_version, kind), text)?;
        Record::from_value(cluster, gvr, object, metadata_only)
    }

    /// [`Record::from_json`] from the text alone; `None` when the text needs the object
    /// read whole, `Some(None)` for an object without a name.
    fn from_text(
        cluster: &str,
        gvr: &Gvr,
        (api_version, kind): (&str, &str),
        text: &str,
        metadata_only: bool,
    ) -> Option<Option<Record>> {
        let Members(members) = serde_json::from_str(text).ok()?;
        // a key twice: the whole read keeps the last (and both stores would get both)
        if has_duplicates(&members) {
            return None;
        }
        let Some((_, meta_raw)) = members.iter().find(|(k, _)| k == "metadata") else {
            return Some(None);
        };
        if meta_raw.get() == "null" {
            return Some(None);
        }
        let Members(fields) = serde_json::from_str(meta_raw.get()).ok()?;
        if has_duplicates(&fields) {
            return None;
        }
        let meta: MetaView = serde_json::from_str(meta_raw.get()).ok()?;
        let name = meta.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            return Some(None);
        }
        let mut owners = Vec::new();
        for o in meta.owner_references.iter().flatten() {
            if !is_object(o) {
                return None;
            }
            owners.push(serde_json::from_str::<OwnerView>(o.get()).ok()?);
        }
        let owner = owners
            .iter()
            .find(|o| o.controller == Some(true))
            .or_else(|| owners.first());
        let mut object = String::with_capacity(text.len() + api_version.len() + kind.len() + 32);
        object.push('{');
        object.push_str("\"apiVersion\":");
        push_json_string(&mut object, api_version);
        object.push_str(",\"kind\":");
        push_json_string(&mut object, kind);
        object.push_str(",\"metadata\":{");
        let kept = |k: &str| {
            if metadata_only {
                names_only_keeps(k)
            } else {
                k != "managedFields"
            }
        };
        for (k, v) in fields.iter().filter(|(k, _)| kept(k)) {
            member(&mut object, k, v.get());
        }
        object.push('}');
        if !metadata_only {
            for (k, v) in &members {
                if !matches!(k.as_ref(), "apiVersion" | "kind" | "metadata") {
                    member(&mut object, k, v.get());
                }
            }
        }
        object.push('}');
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        Some(Some(Record {
            cluster: cluster.to_string(),
            gvr: gvr.clone(),
            namespace: text(&meta.namespace),
            name: name.to_string(),
            uid: text(&meta.uid),
            resource_version: stored_version(
                meta.resource_version.as_deref().unwrap_or_default(),
                metadata_only,
            ),
            owner_uid: owner.and_then(|o| o.uid.clone()),
            created_at: meta
                .creation_timestamp
                .as_deref()
                .unwrap_or_default()
                .parse::<jiff::Timestamp>()
                .ok()
                .map(|t| t.as_millisecond()),
            labels: meta.labels.unwrap_or_default(),
            object,
        }))
    }

    /// Which object this is.
    pub fn key(&self) -> Key {
        Key {
            cluster: self.cluster.clone(),
            gvr: self.gvr.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// The resourceVersion as a number for ordering (0 when it is not one).
    pub(crate) fn rv_num(&self) -> i64 {
        resource_version_of(&self.resource_version)
            .parse()
            .unwrap_or(0)
    }
}

/// An object as the store keeps it: without `managedFields` (and with `metadata_only`,
/// without anything but apiVersion, kind and metadata, and without annotations:
/// [`names_only_keeps`]), NUL characters dropped.
pub(crate) fn cut(object: &mut Value, metadata_only: bool) {
    trim(object, metadata_only);
    without_nul(object);
}

/// [`cut`] but for the NUL characters.
fn trim(object: &mut Value, metadata_only: bool) {
    if let (true, Some(o)) = (metadata_only, object.as_object_mut()) {
        o.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
    }
    if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if metadata_only {
            m.retain(|k, _| names_only_keeps(k));
        } else {
            m.shift_remove("managedFields");
        }
    }
}

/// A stored object (JSON text) as a result: annotated with its cluster.
pub(crate) fn annotated(object: &str, cluster: &str) -> Value {
    let mut v: Value = serde_json::from_str(object).unwrap_or(Value::Null);
    annotate(&mut v, cluster);
    v
}

/// Annotates an object with its cluster.
pub(crate) fn annotate(v: &mut Value, cluster: &str) {
    if let Some(o) = v.as_object_mut() {
        let meta = o
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(m) = meta.as_object_mut() {
            let ann = m
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if !ann.is_object() {
                *ann = Value::Object(Map::new());
            }
            if let Some(a) = ann.as_object_mut() {
                a.insert(CLUSTER_ANNOTATION.into(), Value::String(cluster.into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gvr() -> Gvr {
        Gvr {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
        }
    }

    #[test]
    fn nul_characters_never_reach_a_store() {
        let o = json!({"metadata": {"name": "x", "resourceVersion": "7",
            "labels": {"a": "b\u{0}c"}, "annotations": {"no\u{0}te": "a\u{0}b"}},
            "data": {"k": ["\u{0}"]}});
        let r = Record::from_object("c", &gvr(), &o, false).unwrap();
        assert!(!r.object.contains("\\u0000"), "{}", r.object);
        let v: Value = serde_json::from_str(&r.object).unwrap();
        assert_eq!(v["metadata"]["annotations"]["note"], "ab");
        assert_eq!(v["data"]["k"][0], "");
        assert_eq!(r.labels["a"], "bc");
    }

    #[test]
    fn the_stored_version_carries_the_form() {
        let o = json!({"metadata": {"name": "x", "resourceVersion": "42"}, "data": {"k": "v"}});
        let whole = Record::from_object("c", &gvr(), &o, false).unwrap();
        let names = Record::from_object("c", &gvr(), &o, true).unwrap();
        assert_eq!(whole.resource_version, "42");
        assert_eq!(names.resource_version, "42/names");
        assert_ne!(whole.resource_version, names.resource_version);
        assert_eq!((whole.rv_num(), names.rv_num()), (42, 42));
        assert_eq!(resource_version_of(&names.resource_version), "42");
        assert_eq!(stored_version("42", true), names.resource_version);
    }

    /// The record of `text` both ways: read as text ([`Record::from_json`]) and read
    /// whole ([`whole_object`], then [`Record::from_value`]):
    /// equal, and so are the stored objects once parsed (in their key order).
    fn both_ways(text: &str, metadata_only: bool) -> Option<Record> {
        let av_kind = ("v1", "ConfigMap");
        let fast = Record::from_json("c", &gvr(), av_kind, text, metadata_only);
        let slow = whole_object(av_kind, text)
            .and_then(|v| Record::from_value("c", &gvr(), v, metadata_only));
        let parsed = |r: &Option<Record>| {
            r.as_ref().map(|r| {
                let v: Value = serde_json::from_str(&r.object).expect("stored JSON");
                let mut r = r.clone();
                r.object = v.to_string();
                r
            })
        };
        assert_eq!(parsed(&fast), parsed(&slow), "{text}");
        fast
    }

    #[test]
    fn a_record_read_from_text_is_the_record_of_the_object() {
        let table = [
            // a list item: no apiVersion or kind, managedFields dropped, order kept
            r#"{"metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"5","creationTimestamp":"2026-11-20T10:00:00Z","managedFields":[{"manager":"m","fieldsV1":{"f:data":{}}}],"labels":{"x":"1","y":"2"},"ownerReferences":[{"uid":"o1"},{"uid":"o2","controller":true}]},"data":{"k":"v"},"binaryData":{}}"#,
            // a watch's object: apiVersion and kind replaced by the type's, in front
            r#"{"data":{"k":"v"},"kind":"Other","apiVersion":"x/v9","metadata":{"name":"b","labels":{}}}"#,
            // escapes in keys and values, Go's HTML escaping, spaces
            r#"{ "metadata" : { "name" : "c\u003cd", "annotations": {"a\"b": "\u0026"} }, "da\u0074a": {"\\": "\n"} }"#,
            // no owner is the controller: the first; no owners; no metadata; no name
            r#"{"metadata":{"name":"d","ownerReferences":[{"uid":"o1","controller":false},{"uid":"o2"}]}}"#,
            r#"{"metadata":{"name":"e","ownerReferences":[]}}"#,
            r#"{"spec":{}}"#,
            r#"{"metadata":{"namespace":"n"}}"#,
            r#"{"metadata":{"name":""}}"#,
            // other types than the API's: read whole, with its rules
            r#"{"metadata":{"name":"f","labels":{"n":1,"s":"x"},"uid":7}}"#,
            r#"{"metadata":{"name":7}}"#,
            r#"{"metadata":{"name":"g","ownerReferences":[{"uid":"o1","controller":"yes"}]}}"#,
            r#"{"metadata":{"name":"h","creationTimestamp":"not a time"}}"#,
            // NUL characters: read whole and dropped
            r#"{"metadata":{"name":"i\u0000","labels":{"a\u0000":"b\u0000"}},"data":{"k\u0000":"\u0000"}}"#,
            // not an object, not JSON
            r#"[1,2]"#,
            r#"{"metadata":"#,
            // keys twice (the last one counts), arrays for objects, escaped keys
            r#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#,
            r#"{"metadata":{"name":"a"},"metadata":null}"#,
            r#"{"metadata":{"name":"a"},"data":1,"data":2}"#,
            r#"{"metadata":{"name":"a","annotations":{},"annotations":{"x":"y"}}}"#,
            r#"{"metadata":["x"]}"#,
            r#"{"metadata":{"name":"a","ownerReferences":[["o1",true]]}}"#,
            r#"{"metadata":{"name":"a","managed\u0046ields":[{}]},"me\u0074adata":{"name":"b"}}"#,
            r#"{"metadata":{"name":"a","managed\u0046ields":[{}]}}"#,
            // a lone surrogate is not Unicode: not indexed; a pair is
            r#"{"metadata":{"name":"a\ud800"}}"#,
            r#"{"metadata":{"name":"a\ud83d\ude00"}}"#,
            r#"{"metadata":{"name":"a\u00e9"}}"#,
        ];
        for text in table {
            for metadata_only in [false, true] {
                both_ways(text, metadata_only);
            }
            // the relist's reading of which object it is: as the whole object's
            let whole = Listed::of_value(&serde_json::from_str(text).unwrap_or_default());
            let listed = match Listed::read(text) {
                Some(fast) => {
                    assert_eq!(fast, whole, "{text}");
                    fast
                }
                None => whole,
            };
            // and its uid is the record's (the relist compares them with the stored)
            if let Some(r) = both_ways(text, false) {
                assert_eq!(listed.uid(), r.uid, "{text}");
            }
        }
        assert!(both_ways(r#"{"metadata":{"name":"a\ud800"}}"#, false).is_none());
        let managed = both_ways(
            r#"{"metadata":{"name":"a","managed\u0046ields":[{}]}}"#,
            false,
        );
        assert!(!managed.unwrap().object.contains("ields"));
        let r = both_ways(table[0], false).unwrap();
        assert_eq!(r.owner_uid.as_deref(), Some("o2"));
        assert_eq!(r.labels.len(), 2);
        assert!(
            r.object
                .starts_with(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a""#),
            "{}",
            r.object
        );
        assert!(!r.object.contains("managedFields"), "{}", r.object);
        assert!(
            r.object.ends_with(r#""data":{"k":"v"},"binaryData":{}}"#),
            "{}",
            r.object
        );
        let names = both_ways(table[0], true).unwrap();
        assert!(!names.object.contains(r#""data""#), "{}", names.object);
        assert!(both_ways(table[5], false).is_none());
        assert!(both_ways(table[13], false).is_none());
    }

    /// A names-only copy keeps no annotation: after a client-side `kubectl apply`,
    /// last-applied-configuration holds the whole object (a Secret's data included).
    #[test]
    fn a_names_only_copy_keeps_no_annotation() {
        let applied = r#"{"apiVersion":"v1","kind":"Secret","data":{"password":"aHVudGVyMg=="}}"#;
        let text = json!({
            "metadata": {"name": "creds", "namespace": "n", "resourceVersion": "9",
                "labels": {"app": "web"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": applied,
                    "kapp.k14s.io/original": applied,
                }},
            "data": {"password": "aHVudGVyMg=="},
        })
        .to_string();
        // escaped key names are the same keys
        let escaped = text.replace("\"annotations\"", "\"annot\\u0061tions\"");
        assert_ne!(escaped, text);
        for t in [&text, &escaped] {
            let names = both_ways(t, true).unwrap();
            assert!(!names.object.contains("aHVudGVy"), "{}", names.object);
            assert!(!names.object.contains("annotations"), "{}", names.object);
            assert_eq!(names.labels["app"], "web");
            let whole = both_ways(t, false).unwrap();
            assert!(whole.object.contains("last-applied-configuration"));
        }
        // and so is a watch event's object, cut for the client
        let mut v: Value = serde_json::from_str(&text).unwrap();
        cut(&mut v, true);
        assert!(v["metadata"].get("annotations").is_none(), "{v}");
        assert_eq!(v["metadata"]["labels"]["app"], "web");
    }

    /// Names-only copies stored while they kept annotations read as their
    /// resourceVersion, but are never taken for a current copy: the relist rewrites them.
    #[test]
    fn names_only_copies_of_the_earlier_form_are_rewritten() {
        assert_eq!(resource_version_of("42/metadata"), "42");
        assert_ne!(stored_version("42", true), "42/metadata");
        assert_ne!(stored_version("42", false), "42/metadata");
    }

    use proptest::prelude::Strategy;

    proptest::proptest! {
        /// Any object of strings and nested objects (metadata fields, labels, owners,
        /// managedFields among the keys tried) gives the same record both ways.
        #[test]
        fn any_object_gives_the_same_record_both_ways(
            meta in proptest::collection::btree_map(
                proptest::sample::select(vec!["name", "namespace", "uid", "resourceVersion", "managedFields", "labels", "annotations", "ownerReferences", "creationTimestamp"]),
                proptest::prop_oneof![
                    "[a-z0-9<&\\\"\u{e9}]{0,6}".prop_map(Value::from),
                    proptest::collection::btree_map("[a-z]{1,3}", "[a-z\\\"]{0,3}", 0..3)
                        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k, Value::from(v))).collect())),
                    proptest::collection::vec(
                        (proptest::option::of("[a-z]{1,3}"), proptest::option::of(proptest::bool::ANY)),
                        0..3,
                    )
                    .prop_map(|os| Value::Array(os.into_iter().map(|(uid, c)| {
                        let mut o = Map::new();
                        if let Some(u) = uid { o.insert("uid".into(), u.into()); }
                        if let Some(c) = c { o.insert("controller".into(), c.into()); }
                        Value::Object(o)
                    }).collect())),
                ],
                0..8,
            ),
            rest in proptest::collection::vec(("[a-zA-Z]{1,8}", "[ -~]{0,8}"), 0..5),
            metadata_only in proptest::bool::ANY,
        ) {
            let mut o = Map::new();
            for (k, v) in rest {
                o.insert(k, Value::from(v));
            }
            o.insert("metadata".into(), Value::Object(meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect()));
            both_ways(&Value::Object(o).to_string(), metadata_only);
        }
    }
}
