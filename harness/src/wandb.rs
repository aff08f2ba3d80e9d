//! Weights & Biases through the official Python client: a bridge process (tools/wandb_bridge.py, embedded
//! in the binary) reads the run's metrics records as JSON lines on its stdin. The bridge defines
//! `tokens` (training tokens seen) as the x-axis metric of every chart (`define_metric("*",
//! step_metric="tokens")`); W&B's own step is the optimizer step.
//!
//! Everything here runs on the metrics writer's side: a slow or missing bridge never delays a step, and a
//! failure costs one warning while metrics.jsonl goes on.

use crate::config::LogConfig;
use crate::run_dir::{RunDir, RunMeta};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::{thread::JoinHandle, time::Duration};

/// The bridge script, embedded so that a binary run from any directory finds it.
pub const BRIDGE_SCRIPT: &str = include_str!("../../tools/wandb_bridge.py");
/// Exit status of the bridge when `import wandb` fails.
pub const EXIT_NO_WANDB: i32 = 3;
/// File in the run directory that receives the bridge's (and the wandb client's) own output.
pub const BRIDGE_LOG_FILE: &str = "wandb_bridge.log";
/// Interpreter used when SPARSETRAIN_PYTHON is not set.
pub const DEFAULT_PYTHON: &str = "python3";

/// How one run appears in Weights & Biases.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WandbOptions {
    pub project: String,
    pub entity: Option<String>,
    /// The config name: runs of one config sit side by side in one group.
    pub group: String,
    pub name: String,
    /// The selector kind first, then any extra tags.
    pub tags: Vec<String>,
    /// "online", "offline" or "disabled"; `None` leaves WANDB_MODE as the environment sets it.
    pub mode: Option<String>,
    /// The run directory: wandb keeps its files under `<dir>/wandb/`, the bridge log goes beside.
    pub dir: PathBuf,
    /// Resolved config shown as the W&B run config.
    pub config_json: Option<PathBuf>,
    /// Stable W&B run id, so that a resumed run continues the same W&B run.
    pub run_id: Option<String>,
    pub python: String,
}

impl WandbOptions {
    /// Options for `run` from its identity and the `[log]` config section.
    pub fn for_run(run: &RunDir, meta: &RunMeta, log: &LogConfig) -> WandbOptions {
        let name = if meta.name.is_empty() {
            run.name()
        } else {
            meta.name.clone()
        };
        let mut tags: Vec<String> = Vec::new();
        if !meta.selector.is_empty() {
            tags.push(meta.selector.clone());
        }
        if !meta.task.is_empty() {
            tags.push(meta.task.clone());
        }
        tags.extend(log.wandb_tags.iter().cloned());
        let config_json = run.path().join(crate::run_dir::CONFIG_JSON_FILE);
        WandbOptions {
            project: log.wandb_project.clone(),
            entity: log.wandb_entity.clone(),
            group: if meta.config_name.is_empty() {
                name.clone()
            } else {
                meta.config_name.clone()
            },
            run_id: Some(wandb_run_id(&name, &meta.created_utc)),
            name,
            tags,
            mode: log.wandb_mode.clone(),
            dir: run.path().to_path_buf(),
            config_json: config_json.exists().then_some(config_json),
            python: std::env::var("SPARSETRAIN_PYTHON").unwrap_or_else(|_| DEFAULT_PYTHON.into()),
        }
    }

    /// The bridge's command line (`python3 -c <script> live ...`).
    pub fn command(&self) -> Command {
        self.command_for("live")
    }

    /// The bridge's command line for `subcommand` (`live` or `artifact`) with this run's options.
    fn command_for(&self, subcommand: &str) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.arg("-c").arg(BRIDGE_SCRIPT).arg(subcommand);
        cmd.arg("--project").arg(&self.project);
        cmd.arg("--group").arg(&self.group);
        cmd.arg("--name").arg(&self.name);
        cmd.arg("--dir").arg(&self.dir);
        if !self.tags.is_empty() {
            cmd.arg("--tags").arg(self.tags.join(","));
        }
        if let Some(entity) = &self.entity {
            cmd.arg("--entity").arg(entity);
        }
        if let Some(config) = &self.config_json {
            cmd.arg("--config-json").arg(config);
        }
        if let Some(id) = &self.run_id {
            cmd.arg("--id").arg(id);
        }
        if let Some(mode) = &self.mode {
            cmd.env("WANDB_MODE", mode);
        }
        cmd
    }
}

/// Logs `path` (a folder of the run, e.g. `RUN/sae`) as a W&B artifact named `<name>-<run id>` of type
/// `kind` to the run's W&B run: the bridge resumes that run (same id), logs the artifact and finishes.
/// Waits for it (an online upload takes as long as it takes, up to [`FINISH_WAIT`]); a failure costs a
/// warning, never the run.
pub fn log_artifact(run: &RunDir, log: &LogConfig, path: &Path, name: &str, kind: &str) {
    let meta = match run.read_meta() {
        Ok(meta) => meta,
        Err(e) => return eprintln!("warning: W&B artifact {name} not logged: {e}"),
    };
    let options = WandbOptions::for_run(run, &meta, log);
    let mut cmd = options.command_for("artifact");
    cmd.arg("--artifact-name")
        .arg(name)
        .arg("--artifact-type")
        .arg(kind)
        .arg(path);
    let log_path = run.path().join(BRIDGE_LOG_FILE);
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file.map_or_else(|_| Stdio::null(), Stdio::from));
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            return eprintln!(
                "warning: W&B artifact {name} not logged: could not start `{}`: {e}",
                options.python
            )
        }
    };
    let began = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => {
                return eprintln!("wandb: logged {} as artifact {name}", path.display())
            }
            Ok(Some(_)) | Err(_) => {
                return eprintln!(
                    "warning: W&B artifact {name} not logged (see {})",
                    log_path.display()
                )
            }
            Ok(None) if began.elapsed() > FINISH_WAIT => {
                return eprintln!(
                    "warning: W&B has not logged artifact {name} after {} s; not waiting longer \
                     (see {})",
                    FINISH_WAIT.as_secs(),
                    log_path.display()
                )
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A W&B run id from the run name and creation time: letters, digits, '-' and '_' only.
pub fn wandb_run_id(name: &str, created_utc: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .filter_map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' => Some(c),
                '.' | ' ' | '/' => Some('-'),
                _ => None,
            })
            .collect()
    };
    let stamp: String = created_utc.chars().filter(char::is_ascii_digit).collect();
    // Directory names made by `RunDir::create` already carry the creation time as YYYYmmdd-HHMMSS.
    let compact = if stamp.len() == 14 {
        format!("{}-{}", &stamp[..8], &stamp[8..])
    } else {
        stamp.clone()
    };
    let id = if stamp.is_empty() || name.contains(&compact) {
        clean(name)
    } else {
        format!("{}-{stamp}", clean(name))
    };
    id.chars().take(120).collect()
}

/// The live bridge, owned by the metrics writer thread.
pub(crate) struct Bridge {
    tx: Sender<String>,
    /// Disconnects when the bridge thread ends.
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
    log_path: PathBuf,
}

/// How long the end of a run waits for W&B to finish (an online upload, a hung `wandb.init`).
const FINISH_WAIT: Duration = Duration::from_secs(120);

impl Bridge {
    pub(crate) fn start(options: WandbOptions) -> Bridge {
        let (tx, rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel::<()>();
        let log_path = options.dir.join(BRIDGE_LOG_FILE);
        let thread = std::thread::Builder::new()
            .name("wandb-bridge".into())
            .spawn(move || {
                run_bridge(&options, rx);
                drop(done_tx);
            });
        let thread = match thread {
            Ok(thread) => Some(thread),
            Err(e) => {
                warn(&format!("could not start its thread ({e})"));
                None
            }
        };
        Bridge {
            tx,
            done,
            thread,
            log_path,
        }
    }

    /// Queues one JSON line (with its newline); returns at once.
    pub(crate) fn send(&mut self, line: String) {
        let _ = self.tx.send(line);
    }

    /// Closes the bridge's input and waits (a bounded time) for it to finish the W&B run. A bridge
    /// still busy after that keeps running on its own: it holds the rest of the run's records.
    pub(crate) fn finish(self) {
        drop(self.tx);
        let Some(thread) = self.thread else {
            return;
        };
        match self.done.recv_timeout(FINISH_WAIT) {
            Err(RecvTimeoutError::Timeout) => eprintln!(
                "warning: Weights & Biases has not finished after {} s; not waiting longer \
                 (see {}; `python3 tools/wandb_bridge.py replay RUN_DIR` logs the run again)",
                FINISH_WAIT.as_secs(),
                self.log_path.display()
            ),
            _ => {
                let _ = thread.join();
            }
        }
    }
}

fn warn(why: &str) {
    eprintln!(
        "warning: Weights & Biases logging is off: {why}. Metrics still go to metrics.jsonl; \
         `python3 tools/wandb_bridge.py replay RUN_DIR` uploads them later \
         (needs `pip install -r tools/requirements-wandb.txt`)."
    );
}

fn run_bridge(options: &WandbOptions, rx: Receiver<String>) {
    let log_path = options.dir.join(BRIDGE_LOG_FILE);
    let Some(mut child) = spawn(options, &log_path) else {
        return;
    };
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        warn("the bridge process has no pipes");
        let _ = child.kill();
        return;
    };
    let mut ready = String::new();
    let _ = BufReader::new(stdout).read_line(&mut ready);
    match ready.strip_prefix("ready") {
        Some(where_to) => eprintln!("wandb: {}", where_to.trim()),
        None => {
            drop(stdin);
            report_exit(&mut child, &log_path);
            return;
        }
    }
    if !forward(&rx, &mut stdin) {
        drop(stdin);
        report_exit(&mut child, &log_path);
        return;
    }
    drop(stdin);
    match child.wait() {
        Ok(status) if status.success() => {}
        _ => eprintln!(
            "warning: the W&B bridge did not finish cleanly; see {}",
            log_path.display()
        ),
    }
}

fn spawn(options: &WandbOptions, log_path: &Path) -> Option<Child> {
    let log = match File::create(log_path) {
        Ok(f) => Stdio::from(f),
        Err(_) => Stdio::null(),
    };
    let mut cmd = options.command();
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(log);
    // Its own process group: Ctrl-C stops the training loop, which then closes the bridge's input so
    // the bridge can still finish the W&B run.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    match cmd.spawn() {
        Ok(child) => Some(child),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            warn(&format!(
                "`{}` was not found (set SPARSETRAIN_PYTHON to another interpreter)",
                options.python
            ));
            None
        }
        Err(e) => {
            warn(&format!("could not start `{}`: {e}", options.python));
            None
        }
    }
}

/// Writes every queued line to the bridge; false if the bridge stopped reading.
fn forward(rx: &Receiver<String>, stdin: &mut ChildStdin) -> bool {
    for line in rx {
        if stdin.write_all(line.as_bytes()).is_err() || stdin.flush().is_err() {
            return false;
        }
    }
    true
}

fn report_exit(child: &mut Child, log_path: &Path) {
    let status = child.wait();
    let tail = std::fs::read_to_string(log_path)
        .map(|text| {
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            lines[lines.len().saturating_sub(3)..].join(" | ")
        })
        .unwrap_or_default();
    match status.ok().and_then(|s| s.code()) {
        Some(EXIT_NO_WANDB) => warn("python could not import the `wandb` package"),
        _ => warn(&format!(
            "the bridge stopped ({tail}; full log: {})",
            log_path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_clean_and_stable() {
        assert_eq!(
            wandb_run_id("tiny-profk-20261130-013000", "2026-11-30T01:30:00Z"),
            "tiny-profk-20261130-013000"
        );
        assert_eq!(
            wandb_run_id("my run/1", "2026-11-30T01:30:00Z"),
            "my-run-1-20261130013000"
        );
    }
}
