//! Ctrl-C as a request: the first one sets a flag that the training loop checks between steps (it then
//! checkpoints, flushes metrics and returns); a second one exits at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// A stop request shared between whoever asks (Ctrl-C, a test) and the training loop.
#[derive(Debug, Clone, Default)]
pub struct StopSignal(Arc<AtomicBool>);

static CTRL_C: OnceLock<Result<StopSignal, String>> = OnceLock::new();

impl StopSignal {
    /// A signal nothing but `request` sets.
    pub fn new() -> StopSignal {
        StopSignal::default()
    }

    /// The process-wide signal set by Ctrl-C; installs the handler on first use.
    pub fn ctrl_c() -> Result<StopSignal, String> {
        CTRL_C
            .get_or_init(|| {
                let signal = StopSignal::new();
                let flag = signal.clone();
                ctrlc::set_handler(move || {
                    if flag.0.swap(true, Ordering::SeqCst) {
                        eprintln!("\nsecond interrupt: exiting without a checkpoint");
                        std::process::exit(130);
                    }
                    eprintln!(
                        "\ninterrupt: finishing the current step, then checkpointing \
                         (Ctrl-C again to quit at once)"
                    );
                })
                .map_err(|e| format!("installing the Ctrl-C handler: {e}"))?;
                Ok(signal)
            })
            .clone()
    }

    /// Asks the loop to stop after the current step.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
