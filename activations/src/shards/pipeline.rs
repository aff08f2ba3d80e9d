//! The extraction pipeline: the calling thread runs the model; a host thread copies activations
//! off the device and cuts them into shards; writer threads hash and write shards atomically.
//! Bounded channels between the stages keep memory flat. On CUDA the copy to the host goes into
//! page-locked buffers on a stream of its own, so it overlaps the next batch's forward pass.
use super::manifest::ShardInfo;
use super::shard_file::{self, shard_file_name, ShardMeta};
use crate::corpus::Contexts;
use crate::error::{Error, Result};
use crate::source::hook_rows;
use candle_core::{DType, Device, Tensor};
use gpt2::HookPoint;
use models::Model;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

/// Everything that decides which bytes go where.
pub(super) struct Plan<'a> {
    pub dir: &'a Path,
    pub fingerprint: String,
    pub hooks: &'a [HookPoint],
    pub dtype: DType,
    pub d_model: usize,
    pub context_len: usize,
    pub batch_contexts: usize,
    pub drop_bos: bool,
    pub tokens_per_shard: usize,
    pub total_tokens: usize,
    pub writer_threads: usize,
    /// Shards already on disk from an earlier run, checked.
    pub done: Vec<bool>,
    /// Their manifest entries.
    pub reused: Vec<ShardInfo>,
}

impl Plan<'_> {
    fn kept_per_context(&self) -> usize {
        self.context_len - usize::from(self.drop_bos)
    }

    fn n_shards(&self) -> usize {
        self.done.len()
    }

    fn shard_len(&self, s: usize) -> usize {
        self.tokens_per_shard
            .min(self.total_tokens - s * self.tokens_per_shard)
    }

    fn row_bytes(&self) -> usize {
        self.hooks.len() * self.d_model * self.dtype.size_in_bytes()
    }
}

pub(super) struct Outcome {
    pub shards: Vec<ShardInfo>,
    pub written: usize,
    pub tokens_computed: usize,
    pub complete: bool,
}

struct Job {
    index: usize,
    acts: Vec<u8>,
    tokens: Vec<u32>,
}

/// Writes a shard; its buffer goes back to `recycle` for the next shard.
fn run_job(job: Job, plan: &Plan, recycle: &mpsc::Sender<Vec<u8>>) -> Result<ShardInfo> {
    let Job {
        index,
        mut acts,
        tokens,
    } = job;
    let meta = ShardMeta {
        fingerprint: plan.fingerprint.clone(),
        index,
    };
    let shape = [tokens.len(), plan.hooks.len(), plan.d_model];
    let file = shard_file_name(index);
    let sha256 = shard_file::write(
        &plan.dir.join(&file),
        &meta,
        &acts,
        plan.dtype,
        shape,
        &tokens,
    )?;
    acts.clear();
    let _ = recycle.send(acts); // the host thread may be done already
    Ok(ShardInfo {
        file,
        n_tokens: tokens.len(),
        sha256,
    })
}

/// Shard-sized byte buffers for the host thread: one a writer has finished with, else a fresh one
/// whose pages a helper thread has already touched, so that cutting a shard neither copies it nor
/// waits on page faults.
struct Buffers {
    recycled: mpsc::Receiver<Vec<u8>>,
    fresh: mpsc::Receiver<Vec<u8>>,
    capacity: usize,
}

impl Buffers {
    fn next(&self) -> Vec<u8> {
        self.recycled
            .try_recv()
            .or_else(|_| self.fresh.recv())
            .unwrap_or_else(|_| Vec::with_capacity(self.capacity))
    }
}

/// A buffer of `capacity` bytes whose pages have been written once (then emptied).
fn touched_buffer(capacity: usize) -> Vec<u8> {
    let mut v = vec![1u8; capacity];
    v.clear();
    v
}

/// A batch's activation rows on their way to host memory.
enum Rows {
    Tensor(Tensor),
    #[cfg(feature = "cuda")]
    Pinned(gpt2::ops::PendingCopy),
}

/// Moves activation rows to host memory: asynchronous copies into page-locked buffers on CUDA,
/// a plain copy elsewhere.
struct HostCopy {
    #[cfg(feature = "cuda")]
    pinned: Option<gpt2::ops::PinnedCopier>,
}

impl HostCopy {
    fn new(device: &Device) -> Result<Self> {
        #[cfg(not(feature = "cuda"))]
        let _ = device;
        Ok(Self {
            #[cfg(feature = "cuda")]
            pinned: if device.is_cuda() {
                Some(gpt2::ops::PinnedCopier::new(device)?)
            } else {
                None
            },
        })
    }

    /// Starts moving `t` (any dtype the shards use) to the host.
    fn start(&self, t: Tensor) -> Result<Rows> {
        #[cfg(feature = "cuda")]
        if let Some(p) = &self.pinned {
            return Ok(Rows::Pinned(p.start(&t)?));
        }
        Ok(Rows::Tensor(t))
    }

    /// Appends the rows' values, as little-endian bytes of their dtype, to `out`.
    fn finish(&self, rows: Rows, out: &mut Vec<u8>) -> Result<()> {
        match rows {
            Rows::Tensor(t) => append_bytes(&t, out),
            #[cfg(feature = "cuda")]
            Rows::Pinned(copy) => {
                let p = self
                    .pinned
                    .as_ref()
                    .expect("pinned rows come from the pinned copier");
                Ok(p.finish(copy, out)?)
            }
        }
    }
}

/// Appends a tensor's values, as little-endian bytes of its dtype, to `out` (copies to the host).
fn append_bytes(t: &Tensor, out: &mut Vec<u8>) -> Result<()> {
    let t = t.flatten_all()?.to_device(&Device::Cpu)?;
    match t.dtype() {
        DType::BF16 => out.extend_from_slice(bytemuck::cast_slice(&t.to_vec1::<half::bf16>()?)),
        DType::F16 => out.extend_from_slice(bytemuck::cast_slice(&t.to_vec1::<half::f16>()?)),
        _ => out.extend_from_slice(bytemuck::cast_slice(
            &t.to_dtype(DType::F32)?.to_vec1::<f32>()?,
        )),
    }
    Ok(())
}

/// Receives activation rows in corpus order, starting at row `first_row`, and queues every
/// shard not yet on disk. A finished shard's buffer moves to its writer; the rows past it start
/// the next buffer. Returns (shards written, whether all shards were reached).
fn cut_shards(
    plan: &Plan,
    first_row: usize,
    rows: mpsc::Receiver<(Rows, Vec<u32>)>,
    (host_copy, buffers): (&HostCopy, Buffers),
    jobs: mpsc::SyncSender<Job>,
    (stop_after, stop): (Option<usize>, &runtime::signal::StopSignal),
    progress: &indicatif::ProgressBar,
) -> Result<(usize, bool)> {
    let stopped = || Error::shard(plan.dir, "writer threads stopped");
    let row_bytes = plan.row_bytes();
    let mut pending_acts: Vec<u8> = buffers.next();
    let mut pending_tokens: Vec<u32> = Vec::new();
    let mut pending_start = first_row;
    let mut shard = plan.done.iter().position(|d| !d).unwrap_or(plan.n_shards());
    let mut written = 0;
    while shard < plan.n_shards() {
        let Ok((acts, ids)) = rows.recv() else {
            return Ok((written, false));
        };
        host_copy.finish(acts, &mut pending_acts)?;
        progress.inc(ids.len() as u64);
        pending_tokens.extend(ids);
        while shard < plan.n_shards() {
            let (start, len) = (shard * plan.tokens_per_shard, plan.shard_len(shard));
            if pending_start + pending_tokens.len() < start + len {
                break;
            }
            let off = start - pending_start;
            let end = (off + len) * row_bytes;
            if plan.done[shard] {
                pending_acts.drain(..end);
            } else {
                let mut next = buffers.next();
                next.extend_from_slice(&pending_acts[end..]);
                pending_acts.truncate(end);
                pending_acts.drain(..off * row_bytes);
                jobs.send(Job {
                    index: shard,
                    acts: std::mem::replace(&mut pending_acts, next),
                    tokens: pending_tokens[off..off + len].to_vec(),
                })
                .map_err(|_| stopped())?;
                written += 1;
            }
            pending_tokens.drain(..off + len);
            pending_start = start + len;
            shard += 1;
            if stop_after.is_some_and(|n| written >= n) || stop.is_requested() {
                return Ok((written, false));
            }
        }
    }
    Ok((written, true))
}

/// Runs the model from the batch holding the first missing shard to the end.
pub(super) fn run(
    plan: &Plan,
    model: &Model,
    contexts: &Contexts,
    stop_after: Option<usize>,
    stop: &runtime::signal::StopSignal,
    progress: &indicatif::ProgressBar,
) -> Result<Outcome> {
    let (b, t, kept) = (
        plan.batch_contexts,
        plan.context_len,
        plan.kept_per_context(),
    );
    let n_contexts = plan.total_tokens.div_ceil(kept);
    let first_missing = plan.done.iter().position(|d| !d).unwrap_or(plan.n_shards());
    let first_batch = first_missing * plan.tokens_per_shard / kept / b;
    let first_row = first_batch * b * kept;
    progress.set_position(first_row.min(plan.total_tokens) as u64);
    let device = model.device();
    let available = contexts.len();
    // The whole token array goes to the device once; batches are views into it.
    let all_tokens = Tensor::from_slice(&contexts.tokens, (available, t), device)?;

    let (job_tx, job_rx) = mpsc::sync_channel::<Job>(plan.writer_threads * 2);
    let job_rx = Mutex::new(job_rx);
    let (res_tx, res_rx) = mpsc::channel::<Result<ShardInfo>>();
    let (row_tx, row_rx) = mpsc::sync_channel::<(Rows, Vec<u32>)>(2);
    let (recycle_tx, recycled) = mpsc::channel::<Vec<u8>>();
    let (fresh_tx, fresh) = mpsc::sync_channel::<Vec<u8>>(1);
    // A shard plus the batch that overflows it.
    let capacity = (plan.tokens_per_shard + b * kept) * plan.row_bytes();
    let buffers = Buffers {
        recycled,
        fresh,
        capacity,
    };
    let host_copy = HostCopy::new(device)?;
    let host_copy = &host_copy;
    let failed = &AtomicBool::new(false);
    std::thread::scope(|scope| {
        // After a failed write (a full disk) every writer stops, so the host thread and the model stop
        // too instead of computing shards that cannot be stored.
        for _ in 0..plan.writer_threads {
            let (job_rx, res_tx, recycle) = (&job_rx, res_tx.clone(), recycle_tx.clone());
            scope.spawn(move || loop {
                if failed.load(Ordering::Relaxed) {
                    return;
                }
                let job = match job_rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok(job) = job else { return };
                let result = run_job(job, plan, &recycle);
                if result.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                if res_tx.send(result).is_err() || failed.load(Ordering::Relaxed) {
                    return;
                }
            });
        }
        drop((res_tx, recycle_tx));
        // Stops when the host thread no longer takes buffers.
        scope.spawn(move || while fresh_tx.send(touched_buffer(capacity)).is_ok() {});
        let host = scope.spawn(move || {
            cut_shards(
                plan,
                first_row,
                row_rx,
                (host_copy, buffers),
                job_tx,
                (stop_after, stop),
                progress,
            )
        });

        let mut computed = 0;
        let mut produce = || -> Result<()> {
            let mut c = first_batch * b;
            while c < n_contexts && first_missing < plan.n_shards() {
                let nb = b.min(n_contexts - c);
                let start = c % available;
                let tokens = if start + nb <= available {
                    all_tokens.narrow(0, start, nb)?
                } else {
                    let ids: Vec<u32> = (c..c + nb)
                        .flat_map(|i| contexts.context(i % available).iter().copied())
                        .collect();
                    Tensor::from_vec(ids, (nb, t), device)?
                };
                let (rows, _) = hook_rows(model, &tokens, plan.hooks, plan.drop_bos)?;
                let rows = host_copy.start(rows.to_dtype(plan.dtype)?)?;
                let skip = usize::from(plan.drop_bos);
                let ids: Vec<u32> = (c..c + nb)
                    .flat_map(|i| contexts.context(i % available)[skip..].iter().copied())
                    .collect();
                if row_tx.send((rows, ids)).is_err() {
                    break; // the host thread has all it needs, or failed
                }
                computed += nb * kept;
                c += nb;
            }
            Ok(())
        };
        let produced = produce();
        drop(row_tx);
        let hosted = host
            .join()
            .map_err(|_| Error::shard(plan.dir, "the shard-cutting thread panicked"))?;
        let mut shards = plan.reused.clone();
        let mut first_err = None;
        for r in res_rx {
            match r {
                Ok(info) => shards.push(info),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        // A writer's error is the cause; the other stages only stopped because of it.
        if let Some(e) = first_err {
            return Err(e);
        }
        produced?;
        let (written, complete) = hosted?;
        shards.sort_by(|a, b| a.file.cmp(&b.file));
        Ok(Outcome {
            shards,
            written,
            tokens_computed: computed,
            complete,
        })
    })
}
