//! What a workload depends on: the ConfigMaps, Secrets, ServiceAccount and PVCs its
//! pod template references (federation.md §8 I.56, §1.9).
