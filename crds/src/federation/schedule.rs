//! Choosing member clusters for a binding (issue 14 item 2; being written).
