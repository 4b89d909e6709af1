//! What kube-scheduler, kube-controller-manager's workload controllers and kubelets
//! would do, for a cluster without any of them (as kwok does): simulated nodes with
//! capacity and topology ([`nodes`]), and the pure placement rule ([`schedule`]).

pub mod nodes;
pub mod schedule;
