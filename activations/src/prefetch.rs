//! Producing activations ahead of training: a [`ChunkSource`] makes chunks of rows (shards read, checked
//! and uploaded; or a model forward) and a [`Prefetch`] runs it on a thread of its own behind a bounded
//! queue, so the training step finds the next chunk ready instead of waiting for it. With a depth of 0 the
//! same source runs inline, producing exactly the same chunks.
use crate::error::{Error, Result};
use candle_core::Tensor;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Makes chunks of activation rows, [rows, hooks, d] on the consumer's device, in a deterministic order.
pub trait ChunkSource: Send {
    /// The next chunk, or `None` once the data has run out.
    fn next_chunk(&mut self) -> Result<Option<Tensor>>;
}

/// A [`ChunkSource`] run ahead of its consumer.
pub struct Prefetch {
    mode: Mode,
}

enum Mode {
    Inline(Box<dyn ChunkSource>),
    Ahead {
        queue: Option<Receiver<Result<Option<Tensor>>>>,
        stop: Arc<AtomicBool>,
        worker: Option<JoinHandle<()>>,
        ended: bool,
    },
}

impl Prefetch {
    /// Runs `source` on a background thread holding at most `depth` finished chunks; `depth == 0` runs it
    /// inline, on the caller's thread.
    pub fn new(source: Box<dyn ChunkSource>, depth: usize, name: &str) -> Result<Self> {
        if depth == 0 {
            return Ok(Self {
                mode: Mode::Inline(source),
            });
        }
        let (tx, rx) = sync_channel(depth);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let mut source = source;
        let worker = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    let next = source.next_chunk();
                    let last = !matches!(next, Ok(Some(_)));
                    if tx.send(next).is_err() || last {
                        return;
                    }
                }
            })
            .map_err(|e| {
                Error::config("data.prefetch", format!("starting the {name} thread: {e}"))
            })?;
        Ok(Self {
            mode: Mode::Ahead {
                queue: Some(rx),
                stop,
                worker: Some(worker),
                ended: false,
            },
        })
    }

    /// The next chunk in source order; waits only when the producer is behind.
    pub fn next(&mut self) -> Result<Option<Tensor>> {
        match &mut self.mode {
            Mode::Inline(source) => source.next_chunk(),
            Mode::Ahead { queue, ended, .. } => {
                if *ended {
                    return Ok(None);
                }
                let received = queue.as_ref().map(|q| q.recv());
                match received {
                    Some(Ok(Ok(Some(chunk)))) => Ok(Some(chunk)),
                    Some(Ok(Ok(None))) => {
                        *ended = true;
                        Ok(None)
                    }
                    Some(Ok(Err(e))) => {
                        *ended = true;
                        Err(e)
                    }
                    // The producer is gone without saying why: it panicked.
                    Some(Err(_)) | None => {
                        *ended = true;
                        Err(Error::config(
                            "data",
                            "the activation producer thread stopped unexpectedly",
                        ))
                    }
                }
            }
        }
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        if let Mode::Ahead {
            queue,
            stop,
            worker,
            ..
        } = &mut self.mode
        {
            stop.store(true, Ordering::Relaxed);
            // Dropping the queue unblocks a producer waiting to hand over a chunk.
            drop(queue.take());
            if let Some(w) = worker.take() {
                let _ = w.join();
            }
        }
    }
}
