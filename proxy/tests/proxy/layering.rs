//! The request path's module layering (issue 12): dependencies run one way, the mesh
//! listeners' manager (`mesh`, which opens listeners as the table asks) → listener
//! (`server`) → engines (`h1`, the hyper path `forward`) → `pipeline` → the rest
//! (table, balance, circuit, upstream...). Checked on the sources: no module names one
//! above it or beside it in code (doc comments aside).

use std::path::{Path, PathBuf};

/// The layers, top first: a module may name only modules of later layers.
const LAYERS: [&[&str]; 4] = [&["mesh"], &["server"], &["h1", "forward"], &["pipeline"]];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    // (An entry that vanishes while listed, an editor's temporary file, is skipped.)
    for e in std::fs::read_dir(dir).expect("read proxy/src").flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`h1/wire.rs` → `h1`).
fn module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("a component");
    let s = first.as_os_str().to_string_lossy();
    s.trim_end_matches(".rs").to_string()
}

/// The layers module `m` may not name: its own and those above (the two engines do
/// not know each other); all of them for a module below the pipeline.
fn above(m: &str) -> &'static [&'static [&'static str]] {
    match LAYERS.iter().position(|l| l.contains(&m)) {
        Some(i) => &LAYERS[..=i],
        None => &LAYERS,
    }
}

#[test]
fn request_path_dependencies_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 10, "found the sources: {files:?}");
    let mut wrong = Vec::new();
    for f in &files {
        let m = module(&src, f);
        // lib.rs and main.rs wire everything together (and the CLI).
        if m == "lib" || m == "main" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for l in above(&m) {
                for above in *l {
                    if above != &m && line.contains(&format!("crate::{above}")) {
                        wrong.push(format!("{}:{}: {m} names {above}", f.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies against the layering:\n{}",
        wrong.join("\n")
    );
}
