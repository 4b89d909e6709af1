//! Logging: `tracing` to stderr, as text (coloured only on a terminal, never in a file
//! or a log collector) or as JSON lines.

use std::io::IsTerminal;

use anyhow::Context;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The logging flags every binary takes.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// Log filter (tracing EnvFilter syntax, e.g. `info` or `causeway=debug`); the
    /// default is `info` (`warn` for causeway-local).
    #[arg(long, env = "RUST_LOG")]
    pub log: Option<String>,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl LogArgs {
    /// Installs the global subscriber, with `default` as the filter when `--log` is not
    /// given. Fails with a message naming the flag when the filter does not parse.
    pub fn init(&self, default: &str) -> anyhow::Result<()> {
        init(self.log.as_deref().unwrap_or(default), self.log_format)
    }
}

/// Installs the global subscriber: `filter` (EnvFilter syntax) in `format` on stderr.
pub fn init(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("--log {filter:?} is not a valid filter (try `info`)"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))
}
