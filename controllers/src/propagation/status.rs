//! The binding controller's pure status step: the Works of a binding → its
//! `aggregatedStatus`, `FullyApplied`, and the hub template's `.status` (§8 H.52–53).
