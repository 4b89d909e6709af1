//! Which propagation policy claims a resource template (issue 14 item 1; being written).
