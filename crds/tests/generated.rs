//! `deploy/crds` must hold exactly what the Rust types generate.

use std::fs;
use std::path::PathBuf;

use causeway_crds::crdgen::{GENERATED_HEADER, render_all};

const STALE: &str = "deploy/crds is stale: run `cargo run -p causeway-controllers --bin causeway -- crds write --dir deploy/crds`";

fn deploy_crds() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
}

#[test]
fn deploy_crds_match_the_rust_types() {
    let dir = deploy_crds();
    let rendered = render_all().expect("render CRDs");
    let mut problems = Vec::new();
    for crd in &rendered {
        let path = dir.join(&crd.file_name);
        match fs::read_to_string(&path) {
            Ok(committed) if committed == crd.yaml => {}
            Ok(_) => problems.push(format!("{} differs from the generated CRD", path.display())),
            Err(e) => problems.push(format!("{} cannot be read: {e}", path.display())),
        }
    }
    if let Ok(entries) = fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            let generated =
                fs::read_to_string(&path).is_ok_and(|c| c.starts_with(GENERATED_HEADER));
            if generated && !rendered.iter().any(|r| r.file_name == name) {
                problems.push(format!("{} is no longer generated", path.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{STALE}\n{}", problems.join("\n"));
}
