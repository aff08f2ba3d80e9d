//! `--nproc N`: starts N copies of this program on this host as the ranks of one job, for users
//! without torchrun or SLURM.
//!
//! Each copy gets the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//! MASTER_ADDR = 127.0.0.1, MASTER_PORT = a free port), runs in its own process group (so that a
//! Ctrl-C reaches it once, through the launcher) and inherits stdout and stderr. SIGINT and SIGTERM
//! are forwarded to every rank. When a rank exits non-zero or dies, the others are killed and the
//! launch fails naming it; when some ranks have finished and the rest have not within the timeout,
//! those are killed and named.

use crate::{Error, Result};
use std::ffi::OsString;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the launcher looks at its ranks.
const POLL: Duration = Duration::from_millis(50);

/// Runs `program args` as ranks 0..nproc of one job and waits for all of them. `Ok(code)`: every
/// rank finished with the same exit code (0, or 128 + signal after a forwarded stop); `Err` names
/// the rank that failed or the ranks that hung.
pub fn run_local(
    nproc: usize,
    program: &std::path::Path,
    args: &[OsString],
    timeout: Duration,
) -> Result<i32> {
    if nproc == 0 {
        return Err(Error::Call("--nproc must be at least 1".into()));
    }
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(sig, Arc::clone(&signal), sig as usize)
            .map_err(|e| Error::Call(format!("installing the handler of signal {sig}: {e}")))?;
    }
    let port = free_port()?;
    let mut ranks: Vec<Rank> = Vec::with_capacity(nproc);
    for rank in 0..nproc {
        match spawn(program, args, rank, nproc, port) {
            Ok(child) => ranks.push(Rank {
                child,
                status: None,
            }),
            Err(e) => {
                kill_all(&mut ranks);
                return Err(e);
            }
        }
    }
    let mut forwarded = 0;
    let mut first_done: Option<Instant> = None;
    loop {
        let sig = signal.swap(0, Ordering::SeqCst);
        if sig != 0 {
            forwarded = sig;
            for r in ranks.iter().filter(|r| r.status.is_none()) {
                // SAFETY: signalling the process group of our own child (its pid).
                unsafe { libc::kill(-(r.child.id() as libc::pid_t), sig as libc::c_int) };
            }
        }
        for (rank, r) in ranks.iter_mut().enumerate() {
            if r.status.is_some() {
                continue;
            }
            let status = r
                .child
                .try_wait()
                .map_err(|e| Error::Call(format!("waiting for rank {rank}: {e}")))?;
            let Some(status) = status else { continue };
            r.status = Some(status);
            first_done.get_or_insert_with(Instant::now);
            let code = exit_code(status);
            // A forwarded stop ends every rank with 128 + signal: that is no failure.
            if code != 0 && code != 128 + forwarded as i32 {
                kill_all(&mut ranks);
                return Err(Error::Call(format!(
                    "rank {rank} of {nproc} failed ({}); the other ranks were stopped",
                    describe(status)
                )));
            }
        }
        let running: Vec<usize> = (0..nproc).filter(|&r| ranks[r].status.is_none()).collect();
        if running.is_empty() {
            return Ok(ranks
                .iter()
                .filter_map(|r| r.status.map(exit_code))
                .max()
                .unwrap_or(0));
        }
        if first_done.is_some_and(|t| t.elapsed() > timeout) {
            kill_all(&mut ranks);
            return Err(Error::Timeout {
                missing: running,
                world: nproc,
                seconds: timeout.as_secs_f64(),
            });
        }
        std::thread::sleep(POLL);
    }
}

struct Rank {
    child: Child,
    status: Option<ExitStatus>,
}

fn spawn(
    program: &std::path::Path,
    args: &[OsString],
    rank: usize,
    world: usize,
    port: u16,
) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    Command::new(program)
        .args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("LOCAL_WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .process_group(0)
        .spawn()
        .map_err(|e| Error::Call(format!("starting rank {rank} ({}): {e}", program.display())))
}

/// A port nothing listens on now (rank 0 binds it a moment later).
fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::Call(format!("finding a free port for rank 0: {e}")))
}

fn kill_all(ranks: &mut [Rank]) {
    for r in ranks.iter_mut() {
        // The rank's whole process group (what it started too); one already gone is fine.
        // SAFETY: signalling the process group of our own child (its pid).
        unsafe { libc::kill(-(r.child.id() as libc::pid_t), libc::SIGKILL) };
        if r.status.is_none() {
            r.status = r.child.wait().ok();
        }
    }
}

/// The exit code, or 128 + signal for a rank killed by one (as a shell reports it).
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown status".into(),
    }
}
