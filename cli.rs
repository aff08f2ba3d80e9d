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

/// `CONFIG [--set section.key=value]... [--out DIR [--resume]]`, or `--config-reference`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The TOML config (see configs/ and docs/config.md).
    #[arg(required_unless_present = "config_reference")]
    pub config: Option<PathBuf>,
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
    /// Print the reference of every command's config keys (docs/config.md) and exit.
    #[arg(long, exclusive = true)]
    pub config_reference: bool,
    /// Start N local ranks of this command, one per GPU (each with RANK, WORLD_SIZE, LOCAL_RANK,
    /// MASTER_ADDR and MASTER_PORT set, as torchrun does); needs a [distributed] mode.
    #[arg(long, value_name = "N")]
    pub nproc: Option<usize>,
}

/// This build as run.json records it (`harness::BuildInfo`, serializable), from the same values as
/// `--version`.
pub fn build_info() -> harness::BuildInfo {
    let info = runtime::build_info!();
    harness::BuildInfo {
        version: info.version,
        commit: info.commit,
        dirty: info.dirty,
        features: info.features,
    }
}

impl RunArgs {
    /// The config file (clap requires it unless `--config-reference` was given).
    pub fn config(&self) -> anyhow::Result<PathBuf> {
        self.config
            .clone()
            .ok_or_else(|| anyhow::anyhow!("a CONFIG file is needed (see configs/)"))
    }

    /// With `--nproc N`: runs this command as N local ranks and returns their exit code once all
    /// have finished (an error names a rank that failed or hung); `None` without the flag.
    pub fn launch_ranks(&self) -> anyhow::Result<Option<i32>> {
        let Some(nproc) = self.nproc else {
            return Ok(None);
        };
        let program = std::env::current_exe()?;
        let args = without_nproc(std::env::args_os().skip(1));
        let timeout = std::time::Duration::from_secs_f64(self.distributed_timeout_s()?);
        Ok(Some(collective::launch::run_local(
            nproc, &program, &args, timeout,
        )?))
    }

    /// `distributed.timeout_s` as the config file and its `--set` overrides give it.
    fn distributed_timeout_s(&self) -> anyhow::Result<f64> {
        let key = "distributed.timeout_s=";
        if let Some(v) = self.set.iter().rev().find_map(|s| s.strip_prefix(key)) {
            return v
                .trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("--set {key}{v}: {e}"));
        }
        let path = self.config()?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let value = table
            .get("distributed")
            .and_then(|d| d.get("timeout_s"))
            .and_then(|t| t.as_float().or_else(|| t.as_integer().map(|i| i as f64)));
        Ok(value.unwrap_or(collective::DistributedConfig::default().timeout_s))
    }
}

/// The command line without `--nproc N` / `--nproc=N` (the ranks run the command itself).
fn without_nproc(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        if arg == "--nproc" {
            skip_value = true;
        } else if !arg.to_string_lossy().starts_with("--nproc=") {
            out.push(arg);
        }
    }
    out
}

/// docs/config.md: every key of the configs of `train-sae`, `extract` and `finetune`, from their types.
pub fn config_reference() -> String {
    use harness::config_reference::{markdown, CommandSchema};
    let commands = [
        CommandSchema {
            command: "train-sae",
            schema: schemars::schema_for!(sae::Config),
        },
        CommandSchema {
            command: "extract",
            schema: schemars::schema_for!(activations::shards::ExtractConfig),
        },
        CommandSchema {
            command: "finetune",
            schema: schemars::schema_for!(gradsparse::FinetuneConfig),
        },
    ];
    markdown(CONFIG_REFERENCE_INTRO, &commands)
}

/// The command that writes docs/config.md.
pub const CONFIG_REFERENCE_COMMAND: &str =
    "cargo run --bin train-sae -- --config-reference > docs/config.md";

const CONFIG_REFERENCE_INTRO: &str = "\
# Config reference

Every key of the TOML configs of `train-sae`, `extract` and `finetune`, generated from the config types
(`cargo run --bin train-sae -- --config-reference > docs/config.md`; a test fails when this file is
stale). A key shown as **required** has no default; unknown keys are errors, and a key renamed since an
older config is refused with its new name (`train.adam_eps` → `train.eps`, `[corpus] path` →
`[data] corpus`, ...). `--set section.key=value` overrides any key before the config is checked; an error
names the file and line, or the `--set` that caused it.

The commands share one vocabulary: `name`, `seed`, `device`; in `[data]` `corpus`, `text_column`,
`token_column`, `context` and `held_out_fraction`; in `[train]` `batch_size`, `steps`, `lr`,
`warmup_steps`, `beta1`, `beta2`, `eps`, `checkpoint_every` and `keep_checkpoints`; the `[selector]` and
`[log]` sections. A shared key means the same and has the same default in every command.
";

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

#[cfg(test)]
mod tests {
    #[test]
    fn the_ranks_run_the_command_line_without_nproc() {
        let args = [
            "cfg.toml",
            "--nproc",
            "2",
            "--set",
            "a=1",
            "--nproc=4",
            "--resume",
        ];
        let out = super::without_nproc(args.iter().map(|a| a.into()));
        assert_eq!(out, ["cfg.toml", "--set", "a=1", "--resume"]);
    }

    #[test]
    fn docs_config_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/config.md");
        let written = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            written == super::config_reference(),
            "docs/config.md is stale or missing: regenerate it with `{}`",
            super::CONFIG_REFERENCE_COMMAND
        );
    }
}
