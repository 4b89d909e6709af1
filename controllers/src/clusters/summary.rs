//! What a member's status reports besides health: Kubernetes version, served APIs, node
//! and resource summaries, topology. (Being written: see issue 13, item 3.)
