//! A rank that stops making progress (it died inside a collective's peer, or hangs) would leave every
//! other rank blocked in its next collective for ever: a device-side all-reduce waits on the GPU, where
//! no host timeout reaches it. The watchdog ends this rank instead, with a message naming it, once no
//! step has completed within the group's timeout; a launcher (`--nproc`, torchrun, srun) then ends the
//! job naming the rank that exited.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the watchdog does when it fires: the message says which rank and after which step.
pub type OnStall = Box<dyn FnOnce(String) + Send>;

/// Ends this rank when [`Watchdog::beat`] has not been called within the timeout.
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Milliseconds since `began` of the last beat.
    last_ms: AtomicU64,
    /// The step of the last beat.
    step: AtomicU64,
    began: Instant,
    done: Mutex<bool>,
    wake: Condvar,
    fired: AtomicBool,
}

impl Watchdog {
    /// Watches rank `rank` of `world`; `on_stall` runs (once, on the watchdog's thread) when no beat
    /// came for `timeout`.
    pub fn start(rank: usize, world: usize, timeout: Duration, on_stall: OnStall) -> Watchdog {
        let shared = Arc::new(Shared {
            last_ms: AtomicU64::new(0),
            step: AtomicU64::new(0),
            began: Instant::now(),
            done: Mutex::new(false),
            wake: Condvar::new(),
            fired: AtomicBool::new(false),
        });
        let watched = Arc::clone(&shared);
        let poll = (timeout / 10).clamp(Duration::from_millis(5), Duration::from_secs(1));
        let thread = std::thread::Builder::new()
            .name("rank-watchdog".into())
            .spawn(move || watch(&watched, rank, world, timeout, poll, on_stall))
            .ok();
        Watchdog { shared, thread }
    }

    /// Records that `step` completed.
    pub fn beat(&self, step: u64) {
        let ms = self.shared.began.elapsed().as_millis() as u64;
        self.shared.last_ms.store(ms, Ordering::Relaxed);
        self.shared.step.store(step, Ordering::Relaxed);
    }

    /// Whether it fired.
    pub fn fired(&self) -> bool {
        self.shared.fired.load(Ordering::Relaxed)
    }
}

fn watch(
    shared: &Shared,
    rank: usize,
    world: usize,
    timeout: Duration,
    poll: Duration,
    on_stall: OnStall,
) {
    let mut done = shared.done.lock().unwrap_or_else(|e| e.into_inner());
    while !*done {
        done = shared
            .wake
            .wait_timeout(done, poll)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        let since_beat = shared.began.elapsed().saturating_sub(Duration::from_millis(
            shared.last_ms.load(Ordering::Relaxed),
        ));
        if !*done && since_beat > timeout {
            shared.fired.store(true, Ordering::Relaxed);
            on_stall(format!(
                "rank {rank} of {world}: no step completed for {:.0} s after step {} \
                 (distributed.timeout_s): another rank died or hangs, or this one does; ending \
                 this rank so that the job ends",
                timeout.as_secs_f64(),
                shared.step.load(Ordering::Relaxed)
            ));
            return;
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *self.shared.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a rank does when its watchdog fires: says why on stderr and exits with status 1.
pub fn exit_on_stall() -> OnStall {
    Box::new(|message| {
        eprintln!("error: {message}");
        std::process::exit(1);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn fires_when_no_step_completes_within_the_timeout() {
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::start(
            2,
            4,
            Duration::from_millis(60),
            Box::new(move |m| tx.send(m).unwrap()),
        );
        dog.beat(7);
        let message = rx.recv_timeout(Duration::from_secs(5)).expect("it fires");
        assert!(
            message.contains("rank 2 of 4") && message.contains("after step 7"),
            "{message}"
        );
        assert!(dog.fired());
    }

    #[test]
    fn stays_quiet_while_steps_complete() {
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::start(
            0,
            2,
            Duration::from_millis(200),
            Box::new(move |m| tx.send(m).unwrap()),
        );
        for step in 0..20 {
            std::thread::sleep(Duration::from_millis(20));
            dog.beat(step);
        }
        drop(dog);
        assert!(rx.try_recv().is_err(), "a beating rank was ended");
    }
}
