//! What the command-line tools share: the arguments of a training run and how its end becomes the
//! process's exit status. The tools themselves are `train-sae` (train.rs), `extract`, `finetune` and
//! `sparsetrain-report` (bin/).

use clap::Args;
use std::path::PathBuf;

/// Every tool's `--version`: `0.1.0 (commit 1a2b3c4d5e6f[, dirty]; features: cuda)`.
pub const VERSION: &str = runtime::version_line!();

/// This build's version, commit and features, recorded for the libraries (run.json) and returned.
pub fn record_build() -> runtime::build_info::BuildInfo {
    let info = runtime::build_info!();
    runtime::build_info::record(info.clone());
    info
}

/// `CONFIG [--set section.key=value]... [--out DIR [--resume]]`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The TOML config (see configs/).
    pub config: PathBuf,
    /// Override a config value, e.g. `--set train.lr=3e-4` (repeatable). Applied to the file's TOML
    /// before it is checked, so an unknown key or a wrong type is refused as in the file; the run
    /// directory's config.toml and config.json record the result.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    pub set: Vec<String>,
    /// Run directory (default: runs/<name>-<selector>-<timestamp>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Continue the run in --out from its latest checkpoint.
    #[arg(long, requires = "out")]
    pub resume: bool,
}

/// Log lines (`RUST_LOG`, default `info`) to stderr.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Ends the process with `code` (0, or 128 + signal after a stop) once stdout is flushed.
pub fn exit_with(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}
