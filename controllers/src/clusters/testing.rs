//! Test helpers shared by the registry's unit tests.

use std::path::{Path, PathBuf};

/// Writes `dir/kubeconfig`: one cluster `cl` (`cluster`, a YAML flow mapping), one user
/// `u` (`user`, likewise) and one context `ctx` joining them, current unless `current`
/// is false. Returns its path.
pub fn kubeconfig(dir: &Path, cluster: &str, user: &str, current: bool) -> PathBuf {
    let path = dir.join("kubeconfig");
    let current = if current {
        "current-context: ctx\n"
    } else {
        ""
    };
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: cl
  cluster: {cluster}
users:
- name: u
  user: {user}
contexts:
- name: ctx
  context: {{cluster: cl, user: u}}
{current}"
        ),
    )
    .unwrap();
    path
}
