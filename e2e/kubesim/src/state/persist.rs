//! Optional persistence (`--data-dir`): every committed change is appended to a
//! journal before the client is answered; at start the journal is replayed and
//! rewritten as a compact snapshot, so a local clusterset survives a restart.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::state::registry::GroupResource;
use crate::state::stored::{Event, EventType};

/// The append-only journal of one server.
pub struct Journal {
    path: PathBuf,
    out: BufWriter<File>,
}

/// One replayed object.
pub struct Restored {
    /// Resource.
    pub gr: GroupResource,
    /// The object, with its resourceVersion.
    pub obj: Value,
}

impl Journal {
    /// Replays `<dir>/journal.jsonl` (if any) into the live objects it describes, then
    /// rewrites it as a snapshot and opens it for appending.
    pub fn open(dir: &Path) -> std::io::Result<(Journal, Vec<Restored>, u64)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("journal.jsonl");
        let mut live: std::collections::BTreeMap<(String, String, String, String), Value> =
            Default::default();
        let mut max_rv = 0;
        if path.exists() {
            for (i, line) in BufReader::new(File::open(&path)?).lines().enumerate() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                // A torn last line (crash mid-write) is skipped; earlier damage is an error.
                let Ok(rec) = serde_json::from_str::<Value>(&line) else {
                    tracing::warn!(line = i + 1, path = %path.display(), "skipping an unreadable journal line");
                    continue;
                };
                let s = |k: &str| rec.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                max_rv = max_rv.max(rec.get("rv").and_then(Value::as_u64).unwrap_or(0));
                let key = (s("group"), s("resource"), s("namespace"), s("name"));
                match s("op").as_str() {
                    "put" => {
                        live.insert(key, rec.get("object").cloned().unwrap_or(Value::Null));
                    }
                    "delete" => {
                        live.remove(&key);
                    }
                    _ => {}
                }
            }
        }
        let restored: Vec<Restored> = live
            .into_iter()
            .map(|((group, resource, _, _), obj)| Restored {
                gr: GroupResource { group, resource },
                obj,
            })
            .collect();
        // compact: rewrite the snapshot atomically
        let tmp = dir.join("journal.jsonl.tmp");
        {
            let mut w = BufWriter::new(File::create(&tmp)?);
            for r in &restored {
                writeln!(w, "{}", record("put", &r.gr, &r.obj, rv_of(&r.obj)))?;
            }
            w.flush()?;
            w.get_ref().sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        let out = BufWriter::new(OpenOptions::new().append(true).open(&path)?);
        Ok((Journal { path, out }, restored, max_rv))
    }

    /// Appends a committed change and flushes it to the OS.
    pub fn append(&mut self, e: &Event) {
        let op = if e.kind == EventType::Deleted {
            "delete"
        } else {
            "put"
        };
        let line = record(op, &e.gr, &e.obj.value, e.rv);
        if let Err(err) = writeln!(self.out, "{line}").and_then(|_| self.out.flush()) {
            tracing::error!(path = %self.path.display(), error = %err, "journal write failed; this change will not survive a restart");
        }
    }
}

fn rv_of(v: &Value) -> u64 {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn record(op: &str, gr: &GroupResource, obj: &Value, rv: u64) -> Value {
    let m = |k: &str| {
        obj.pointer(&format!("/metadata/{k}"))
            .cloned()
            .unwrap_or(json!(""))
    };
    let mut r = json!({"op": op, "rv": rv, "group": gr.group, "resource": gr.resource, "namespace": m("namespace"), "name": m("name")});
    if op == "put" {
        r["object"] = obj.clone();
    }
    r
}
