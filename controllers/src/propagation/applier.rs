//! The work applier: the Works of one member's execution namespace → server-side
//! apply into the member, status back on each Work (federation.md §8 E, F, G, H).

pub mod plan;

#[cfg(test)]
mod tests;
