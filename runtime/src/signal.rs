//! SIGINT and SIGTERM as a request to stop: the first one sets a flag that the training loop checks
//! between steps (it then finishes the step, checkpoints, flushes metrics and returns); a second one
//! exits at once with 128 + signal, without a checkpoint. SIGTERM is what `docker stop`, SLURM and
//! `timeout` send, so both are handled alike.

use crate::error::{Error, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A stop request shared between whoever asks (a signal, a test) and the training loop.
#[derive(Debug, Clone, Default)]
pub struct StopSignal {
    requested: Arc<AtomicBool>,
    /// The signal number that asked, 0 when none did (or `request` did).
    signal: Arc<AtomicUsize>,
}

static INSTALLED: OnceLock<std::result::Result<StopSignal, String>> = OnceLock::new();

impl StopSignal {
    /// A signal nothing but `request` sets.
    pub fn new() -> StopSignal {
        StopSignal::default()
    }

    /// The process-wide stop request set by SIGINT or SIGTERM; installs the handlers on first use.
    pub fn install() -> Result<StopSignal> {
        INSTALLED
            .get_or_init(|| {
                let stop = StopSignal::new();
                for sig in [SIGINT, SIGTERM] {
                    // Registered first, so it sees the flag as the previous signal left it: set means
                    // this is the second signal.
                    signal_hook::flag::register_conditional_shutdown(
                        sig,
                        128 + sig,
                        Arc::clone(&stop.requested),
                    )
                    .and_then(|_| {
                        signal_hook::flag::register_usize(
                            sig,
                            Arc::clone(&stop.signal),
                            sig as usize,
                        )
                    })
                    .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&stop.requested)))
                    .map_err(|e| format!("installing the handler of {}: {e}", signal_name(sig)))?;
                }
                notice_first_signal()?;
                Ok(stop)
            })
            .clone()
            .map_err(Error::Signal)
    }

    /// Asks the loop to stop after the current step.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
    }

    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// The signal that asked to stop (SIGINT = 2, SIGTERM = 15), if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            sig => i32::try_from(sig).ok(),
        }
    }

    /// The exit status of a process stopped by this request: 128 + signal (130 for SIGINT, 143 for
    /// SIGTERM), 130 when the request came from elsewhere.
    pub fn exit_code(&self) -> i32 {
        128 + self.signal().unwrap_or(SIGINT)
    }

    /// "SIGTERM", "SIGINT" or "a stop request".
    pub fn describe(&self) -> String {
        self.signal()
            .map_or_else(|| "a stop request".into(), |s| signal_name(s).into())
    }
}

/// Says at once that the signal was heard; the loop only notices it when the step ends.
fn notice_first_signal() -> std::result::Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("watching SIGINT/SIGTERM: {e}"))?;
    std::thread::Builder::new()
        .name("signal-notice".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                eprintln!(
                    "\n{}: finishing the current step, then checkpointing (send it again to quit at \
                     once, without a checkpoint)",
                    signal_name(sig)
                );
            }
        })
        .map(|_| ())
        .map_err(|e| format!("starting the signal watcher: {e}"))
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_a_signal_exits_as_an_interrupt() {
        let stop = StopSignal::new();
        assert!(!stop.is_requested());
        stop.request();
        assert!(stop.is_requested());
        assert_eq!(stop.signal(), None);
        assert_eq!(stop.exit_code(), 130);
    }
}
