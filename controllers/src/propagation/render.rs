//! The binding controller's pure step: a binding, its template and the override
//! policies → one `Work` per scheduled cluster (federation.md §8 D, E).
