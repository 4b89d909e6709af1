//! What a request may be and where it goes, on both request paths (the HTTP/1.1
//! engine and hyper): exactly one valid Host, absolute-form targets routed by their
//! authority, dot-segments resolved before routing, underscored header names and
//! asterisk-form, the Upgrade allow-list, and host precedence.

use std::time::Duration;

#[test]
fn logs_to_a_file_have_no_colour_codes() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("causeway-proxy-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // A hub nobody serves: the proxy logs that its watches fail.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n\
         clusters: [{name: dead, cluster: {server: 'http://127.0.0.1:9'}}]\n\
         contexts: [{name: dead, context: {cluster: dead, user: dead}}]\n\
         users: [{name: dead, user: {}}]\n",
    )?;
    // Both streams to the file, as a service manager or `> log 2>&1` would.
    let log = dir.join("proxy.log");
    let out = std::fs::File::create(&log)?;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_causeway-proxy"))
        .args(["--listen-http", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        .args(["--no-publish", "--log", "info"])
        .arg("--hub-kubeconfig")
        .arg(&kubeconfig)
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    while std::time::Instant::now() < deadline {
        text = std::fs::read_to_string(&log)?;
        if text.contains("WARN") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text.contains("WARN"), "no warning logged: {text}");
    assert!(
        !text.contains('\x1b'),
        "colour codes in a log file: {text:?}"
    );
    Ok(())
}
