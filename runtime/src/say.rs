//! Errors as a person reads them: an API server's refusal as its message (kube-rs's
//! own text of one adds the whole `Status` in Rust's debug form), and an error's
//! causes joined by `: `, as anyhow's alternate form joins them.

/// An API server's refusal as `message (HTTP code, reason)`; any other error as it
/// says itself.
pub fn kube(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason.is_empty() => format!("{} (HTTP {})", s.message, s.code),
        kube::Error::Api(s) => format!("{} (HTTP {}, {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

/// Any error as a person reads it: [`kube`]'s form for an API server's refusal, else
/// its own text.
pub fn display<E: std::fmt::Display + 'static>(e: &E) -> String {
    match (e as &dyn std::any::Any).downcast_ref::<kube::Error>() {
        Some(k) => kube(k),
        None => e.to_string(),
    }
}

/// `e` and its causes, each API server refusal in [`kube`]'s form.
/// A cause an error's own text already says (a `#[source]` its message includes) is
/// not said twice.
pub fn error(e: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in e.chain() {
        // (what a kube error holds, its Status say, is said by [`kube`])
        let (text, last) = match cause.downcast_ref::<kube::Error>() {
            Some(k) => (kube(k), true),
            None => (cause.to_string(), false),
        };
        if !said.last().is_some_and(|l| l.contains(&text)) {
            said.push(text);
        }
        if last {
            break;
        }
    }
    said.join(": ")
}

/// What a command-line `main` returns: success, or the error said on stderr (as
/// [`error`] says it, after `program: `) and exit status 1.
pub fn exit(program: &str, r: anyhow::Result<()>) -> std::process::ExitCode {
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {}", error(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn forbidden() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(
                "clusters.causeway.io \"east\" is forbidden: User \"dev\" cannot patch resource",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        )
    }

    #[test]
    fn refusals_read_as_their_message_not_rust_debug() {
        let e = Err::<(), _>(forbidden())
            .context("writing the taints of Cluster east")
            .unwrap_err();
        let said = error(&e);
        assert_eq!(
            said,
            "writing the taints of Cluster east: clusters.causeway.io \"east\" is forbidden: User \"dev\" cannot patch resource (HTTP 403, Forbidden)"
        );
        // kube-rs's own text carries the Status in debug form
        assert!(format!("{e:#}").contains("Status {"));
        assert!(!said.contains("Status {") && !said.contains("Some("));
        // a cause its error's message includes is said once
        let apply = crate::apply::ApplyError::Kube {
            verb: "apply",
            kind: "Cluster".into(),
            namespace: String::new(),
            name: "east".into(),
            source: forbidden(),
        };
        let said = error(&anyhow::Error::new(apply).context("registering east"));
        assert_eq!(said.matches("is forbidden").count(), 1, "{said}");
        assert!(
            said.starts_with("registering east: apply Cluster /east: "),
            "{said}"
        );
        let plain = anyhow::anyhow!("no Cluster \"x\"").context("cordon");
        assert_eq!(error(&plain), "cordon: no Cluster \"x\"");
    }
}
