//! Applying overriders to a rendered manifest (issue 14 item 3; being written).
