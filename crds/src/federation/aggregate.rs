//! The hub template's `.status` aggregated from its members' (federation.md §8 H.53).
