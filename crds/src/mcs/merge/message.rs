//! The Conflict condition's reasons and message (EXP-7).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Conflict, Export, reason_rank};
use crate::mcs::ServicePort;
use crate::mcs::conditions::service_export::reason;

/// At most this many left-out ports are listed in the message.
const MAX_LISTED_PORTS: usize = 10;

/// The contested fields of one merge, collected in any order.
pub(super) struct Contested<'o, 'a> {
    /// The exports in precedence order (never empty).
    order: &'o [Export<'a>],
    items: Vec<(&'static str, String)>,
}

impl<'o, 'a> Contested<'o, 'a> {
    pub(super) fn new(order: &'o [Export<'a>]) -> Self {
        Self {
            order,
            items: Vec::new(),
        }
    }

    fn winner(&self) -> &str {
        self.order.first().map_or("", |e| e.cluster)
    }

    fn total(&self) -> usize {
        self.order.len()
    }

    /// A field whose value is the winner's, contested when `n` (the number of
    /// exports that disagree) is not 0: `Conflicting <field>. Using <value> from
    /// oldest service export in "<winner>". <n>/<total> clusters disagree.`
    pub(super) fn field(
        &mut self,
        reason: &'static str,
        field: &str,
        n: usize,
        value: impl FnOnce() -> String,
    ) {
        if n == 0 {
            return;
        }
        let sentence = format!(
            "Conflicting {field}. Using {} from oldest service export in {:?}. {n}/{} clusters disagree.",
            value(),
            self.winner(),
            self.total()
        );
        self.items.push((reason, sentence));
    }

    /// The ports (a union), contested when `n` is not 0; the clashing ports
    /// are listed.
    pub(super) fn ports(&mut self, n: usize, excluded: &BTreeMap<String, Vec<ServicePort>>) {
        if n == 0 {
            return;
        }
        let mut sentence = format!(
            "Conflicting ports. Using the union of all exported ports, clashing ports resolved by \
             precedence starting with oldest service export in {:?}. {n}/{} clusters disagree.",
            self.winner(),
            self.total()
        );
        let left_out: Vec<String> = excluded
            .iter()
            .flat_map(|(cluster, ports)| {
                ports
                    .iter()
                    .map(move |p| format!("{cluster:?} {}", display_port(p)))
            })
            .collect();
        if !left_out.is_empty() {
            let listed = left_out
                .iter()
                .take(MAX_LISTED_PORTS)
                .cloned()
                .collect::<Vec<_>>();
            sentence.push_str(" Ports left out: ");
            sentence.push_str(&listed.join(", "));
            if left_out.len() > MAX_LISTED_PORTS {
                sentence.push_str(&format!(" and {} more", left_out.len() - MAX_LISTED_PORTS));
            }
            sentence.push('.');
        }
        self.items.push((reason::PORT_CONFLICT, sentence));
    }

    /// The IP families, which come from `source` (the winner unless its
    /// families are unknown), contested when `n` is not 0.
    pub(super) fn ip_families(&mut self, families: &[&str], source: &str, n: usize) {
        if n == 0 {
            return;
        }
        let total = self.total();
        let from = if source == self.winner() {
            format!("oldest service export in {source:?}")
        } else {
            format!(
                "oldest service export with known families, in {source:?} (the oldest, {:?}, has none)",
                self.winner()
            )
        };
        let sentence = format!(
            "Conflicting ipFamilies. Using {} from {from}. {n}/{total} clusters disagree.",
            json(&families)
        );
        self.items.push((reason::IP_FAMILY_CONFLICT, sentence));
    }

    /// The verdict: `None` when nothing is contested.
    pub(super) fn into_conflict(mut self) -> Option<Conflict> {
        if self.items.is_empty() {
            return None;
        }
        self.items.sort_by_key(|(reason, _)| reason_rank(reason));
        let mut sentences: Vec<String> = Vec::with_capacity(self.items.len() + 1);
        let mut reasons = Vec::with_capacity(self.items.len());
        let tie_note = self.tie_note();
        for (reason, sentence) in self.items {
            reasons.push(reason);
            sentences.push(sentence);
        }
        sentences.extend(tie_note);
        Some(Conflict {
            reasons,
            message: sentences.join(" "),
        })
    }

    /// Explains a winner decided by cluster id order rather than by age.
    fn tie_note(&self) -> Option<String> {
        let (first, rest) = self.order.split_first()?;
        let tied = rest
            .iter()
            .take_while(|e| e.created == first.created)
            .count();
        if tied == 0 {
            return None;
        }
        let others = if tied == 1 { "export" } else { "exports" };
        Some(match first.created {
            None => format!(
                "No service export has a known creation time; {:?} wins by cluster id order.",
                first.cluster
            ),
            Some(_) => format!(
                "{:?} has the same creation time as {tied} other service {others}; the tie is broken by cluster id order.",
                first.cluster
            ),
        })
    }
}

/// `name:port/PROTOCOL`, or `port/PROTOCOL` when unnamed, plus the appProtocol.
fn display_port(port: &ServicePort) -> String {
    let mut out = match &port.name {
        Some(name) => format!("{name}:{}/{}", port.port, port.protocol_or_default()),
        None => format!("{}/{}", port.port, port.protocol_or_default()),
    };
    if let Some(app) = &port.app_protocol {
        out.push_str(&format!(" (appProtocol {app})"));
    }
    out
}

/// Compact JSON of a value for a message (`(unserialisable)` never happens for
/// the types used here).
pub(super) fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "(unserialisable)".to_owned())
}
