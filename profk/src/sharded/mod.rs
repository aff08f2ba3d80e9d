//! Exact top-k over scores sharded across ranks: one pooled sample, one threshold, one count, one
//! exact cut.
//!
//! Every rank holds one block of a global `rows × cols` matrix ([`Block`]). One attempt:
//! 1. every rank draws the same S global indices, uniformly without replacement from the whole
//!    matrix (the single-device draw for the same seed), and sends the values of those it holds;
//!    the gathered values are one uniform sample of the whole, so every rank finds the same
//!    threshold, the t-th largest, and the single-device failure probabilities hold exactly;
//! 2. each rank counts and keeps its elements at or above the threshold (ties by global index);
//! 3. an all-reduce of the counts checks k ≤ R ≤ M over all ranks; on failure every rank redraws
//!    with the next attempt's stream, as the single-device rule does;
//! 4. an all-gather of the candidates (global index, value) and an exact cut give every rank the
//!    global top-k, ties by lowest global index, and thereby its own share.
//!
//! After [`MAX_ATTEMPTS`] failures each rank sends its exact local top-k instead, which holds the
//! global top-k. Every decision depends only on gathered or reduced data, so all ranks take the same
//! branch and make the same collective calls. The ranks talk through [`Exchange`], which this crate
//! leaves to the caller: it knows no transport.

mod layout;
mod wire;

pub use layout::Block;
pub use wire::{candidate_bytes, WireBudget, WireValue, COUNT_BYTES};

use crate::params::{self, Method, Params};
use crate::select::cpu::{exact, filter, rank::rank_order, sample};
use crate::select::key::{Element, KeyBits};
use crate::select::Plan;
use crate::{Error, NanPolicy, Order, Result, TopKOptions, MAX_ATTEMPTS};
use std::time::{Duration, Instant};

/// A failure of the transport under [`Exchange`].
pub type ExchangeError = Box<dyn std::error::Error + Send + Sync>;

/// The two collectives the sharded selection needs. Every rank calls them in the same order.
pub trait Exchange {
    fn rank(&self) -> usize;
    fn world(&self) -> usize;
    /// Every rank's bytes in rank order; lengths may differ.
    fn all_gather(&self, mine: &[u8]) -> std::result::Result<Vec<Vec<u8>>, ExchangeError>;
    /// Element-wise sum over the ranks, in place.
    fn all_reduce_sum(&self, counts: &mut [u64]) -> std::result::Result<(), ExchangeError>;
}

/// The exchange of a job of one rank: the sharded selection then runs on one device, unchanged.
pub struct OneRank;

impl Exchange for OneRank {
    fn rank(&self) -> usize {
        0
    }
    fn world(&self) -> usize {
        1
    }
    fn all_gather(&self, mine: &[u8]) -> std::result::Result<Vec<Vec<u8>>, ExchangeError> {
        Ok(vec![mine.to_vec()])
    }
    fn all_reduce_sum(&self, _: &mut [u64]) -> std::result::Result<(), ExchangeError> {
        Ok(())
    }
}

/// What a sharded call did, on this rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardedStats {
    /// Attempts made, the successful one included.
    pub attempts: u32,
    pub recall_failures: u32,
    pub overflows: u32,
    /// R of the last attempt, over all ranks.
    pub retained: u64,
    /// Every attempt failed and the local exact top-k were gathered instead.
    pub fell_back: bool,
    /// The plan: sample size S, threshold rank t, capacity M (zeros without sampling).
    pub sample: u64,
    pub threshold_rank: u64,
    pub capacity: u64,
    /// Bytes this rank handed to the collectives.
    pub bytes_sent: u64,
    /// Bytes this rank received from the gathers, its own included.
    pub bytes_gathered: u64,
    /// Time inside the collectives.
    pub time_collectives: Duration,
    pub time_total: Duration,
}

/// The global top-k, identical on every rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Sharded<T> {
    /// Global indices (row-major in the global matrix), in the requested order.
    pub indices: Vec<u64>,
    /// Their values.
    pub values: Vec<T>,
    pub stats: ShardedStats,
}

impl<T> Sharded<T> {
    /// This rank's share: (position in the output, local position in `block`) of every selected
    /// element the block holds, in output order.
    pub fn own(&self, block: &Block) -> Vec<(usize, u64)> {
        self.indices
            .iter()
            .enumerate()
            .filter_map(|(pos, &g)| block.local(g).map(|l| (pos, l)))
            .collect()
    }
}

/// The plan of a sharded selection of `k` from `n`: Theorem 4's exact parameters at the default
/// sample size (the pooled sample is one sample of all n, so the single-device rule applies
/// unchanged). `None`: nothing to select, or a full selection, where the exact local top-k are
/// gathered instead of sampling everything.
pub fn params_for(n: u64, k: u64, eps: f64) -> Result<Option<Params>> {
    if k == 0 {
        return Ok(None);
    }
    let p = params::cached(n, k, eps, Method::Exact)?;
    Ok((!p.is_full_selection()).then_some(p))
}

/// The exact top-`k` of the global matrix whose block `block` this rank holds as `shard`
/// (row-major). `opts` gives the order, NaN policy, ranking by magnitude, ε and seed; the selector,
/// mode and approximate mode do not apply (the call is always Prof-K over the whole matrix, exact).
pub fn topk<T: WireValue, E: Exchange + ?Sized>(
    ex: &E,
    shard: &[T],
    block: Block,
    k: usize,
    opts: &TopKOptions,
) -> Result<Sharded<T>> {
    block.check()?;
    let plan = params_for(block.global_len(), k as u64, opts.eps)?.map(Plan::from);
    topk_with_plan(ex, shard, block, k, opts, plan)
}

/// [`topk`] with a given plan (`None`: gather the exact local top-k without sampling).
pub fn topk_with_plan<T: WireValue, E: Exchange + ?Sized>(
    ex: &E,
    shard: &[T],
    block: Block,
    k: usize,
    opts: &TopKOptions,
    plan: Option<Plan>,
) -> Result<Sharded<T>> {
    let mut call = Call::new(ex, shard, block, k, opts)?;
    let out = if opts.by_magnitude {
        call.run::<true>(plan)
    } else {
        call.run::<false>(plan)
    };
    out.map(|mut s| {
        s.stats.time_total = call.started.elapsed();
        s
    })
}

/// R of the first attempt with `plan` and `seed`, over all ranks: the count the check k ≤ R ≤ M
/// sees (NaN ranks above +inf).
pub fn first_attempt_retained<T: WireValue, E: Exchange + ?Sized>(
    ex: &E,
    shard: &[T],
    block: Block,
    plan: Plan,
    seed: u64,
) -> Result<u64> {
    let opts = TopKOptions {
        seed,
        nan: NanPolicy::Largest,
        ..TopKOptions::default()
    };
    let mut call = Call::new(ex, shard, block, plan.t as usize, &opts)?;
    call.check_plan(plan)?;
    let (thr, _) = call.pooled_threshold::<false>(plan, 0)?;
    let pass = call.filter::<false>(thr, plan.capacity);
    let mut counts = [pass.retained];
    call.reduce(&mut counts)?;
    Ok(counts[0])
}

/// One call on one rank.
struct Call<'a, T, E: ?Sized> {
    ex: &'a E,
    shard: &'a [T],
    block: Block,
    k: usize,
    order: Order,
    nan_error: bool,
    seed: u64,
    stats: ShardedStats,
    started: Instant,
}

/// A candidate of the exact cut: key, global index, value.
type Ranked<K, T> = (K, u64, T);

impl<'a, T: WireValue, E: Exchange + ?Sized> Call<'a, T, E> {
    fn new(ex: &'a E, shard: &'a [T], block: Block, k: usize, opts: &TopKOptions) -> Result<Self> {
        block.check()?;
        if shard.len() as u64 != block.len() {
            return Err(Error::Param(format!(
                "rank {}: a shard of {} elements for a block of {} × {}",
                ex.rank(),
                shard.len(),
                block.row_count,
                block.col_count
            )));
        }
        if k as u64 > block.global_len() {
            return Err(Error::KTooLarge {
                k,
                n: block.global_len() as usize,
            });
        }
        Ok(Call {
            ex,
            shard,
            block,
            k,
            order: opts.order,
            nan_error: opts.nan == NanPolicy::Error,
            seed: opts.seed,
            stats: ShardedStats::default(),
            started: Instant::now(),
        })
    }

    fn check_plan(&self, plan: Plan) -> Result<()> {
        let n = self.block.global_len();
        if plan.sample == 0 || plan.sample > n || plan.t == 0 || plan.t > plan.sample {
            return Err(Error::Param(format!(
                "plan {plan:?} needs 1 <= t <= sample <= n = {n}"
            )));
        }
        Ok(())
    }

    fn run<const MAG: bool>(&mut self, plan: Option<Plan>) -> Result<Sharded<T>> {
        if self.k == 0 {
            return Ok(self.finish(Vec::new()));
        }
        let Some(plan) = plan else {
            return self.gather_local_tops::<MAG>();
        };
        self.check_plan(plan)?;
        self.stats.sample = plan.sample;
        self.stats.threshold_rank = plan.t;
        self.stats.capacity = plan.capacity;
        let k = self.k as u64;
        for attempt in 0..MAX_ATTEMPTS {
            self.stats.attempts = attempt + 1;
            let (thr, sampled_nan) = self.pooled_threshold::<MAG>(plan, attempt)?;
            if self.nan_error && sampled_nan {
                return Err(self.nan_report()?);
            }
            let pass = self.filter::<MAG>(thr, plan.capacity);
            let mut counts = [pass.retained, pass.nans];
            self.reduce(&mut counts)?;
            let [retained, nans] = counts;
            self.stats.retained = retained;
            if self.nan_error && nans > 0 {
                return Err(self.nan_report()?);
            }
            if retained < k {
                self.stats.recall_failures += 1;
                continue;
            }
            if retained > plan.capacity {
                self.stats.overflows += 1;
                continue;
            }
            let local: Vec<u64> = pass.candidates.iter().map(|c| c.1).collect();
            let all = self.gather_candidates::<MAG>(&local)?;
            return Ok(self.cut(all));
        }
        self.stats.fell_back = true;
        self.gather_local_tops::<MAG>()
    }

    /// Stages 1 and 2: the pooled sample of `attempt` and its t-th largest (key, global index);
    /// and whether the sample holds a NaN.
    fn pooled_threshold<const MAG: bool>(
        &mut self,
        plan: Plan,
        attempt: u32,
    ) -> Result<(sample::Threshold<<T as Element>::Key>, bool)> {
        let n = self.block.global_len();
        let drawn = sample::draw(&mut sample::stream(self.seed, 0, attempt), n, plan.sample);
        let mut msg = self.block.to_bytes().to_vec();
        msg.reserve(drawn.len() / self.ex.world().max(1) * T::BYTES);
        for &g in &drawn {
            if let Some(l) = self.block.local(g) {
                self.shard[l as usize].put(&mut msg);
            }
        }
        let all = self.gather(&msg)?;
        let blocks: Vec<Block> = all
            .iter()
            .enumerate()
            .map(|(r, m)| {
                Block::from_bytes(m).ok_or_else(|| {
                    Error::Param(format!("rank {r} sent a sample without its block"))
                })
            })
            .collect::<Result<_>>()?;
        layout::check_tiling(&blocks)?;
        // Every rank drew the same indices: the values come back in the draw's order, per owner.
        let mut cursor: Vec<usize> = vec![layout::BLOCK_BYTES; all.len()];
        let mut keyed: Vec<(<T as Element>::Key, u64)> = Vec::with_capacity(drawn.len());
        let mut nan = false;
        for &g in &drawn {
            let owner = blocks
                .iter()
                .position(|b| b.local(g).is_some())
                .ok_or_else(|| Error::Param(format!("no rank holds global index {g}")))?;
            let bytes = all[owner]
                .get(cursor[owner]..cursor[owner] + T::BYTES)
                .ok_or_else(|| Error::Param(format!("rank {owner} sent a short sample")))?;
            cursor[owner] += T::BYTES;
            let x = T::get(bytes);
            nan |= x.is_nan_value();
            keyed.push((x.key::<MAG>(), g));
        }
        let t = plan.t as usize;
        let (_, &mut (key, index), _) = keyed.select_nth_unstable_by(t - 1, rank_order);
        Ok((sample::Threshold { key, index }, nan))
    }

    /// Stage 3 on this rank's block: the threshold's global index becomes a local split.
    fn filter<const MAG: bool>(
        &self,
        thr: sample::Threshold<<T as Element>::Key>,
        capacity: u64,
    ) -> filter::Pass<<T as Element>::Key> {
        let empty = filter::Pass {
            retained: 0,
            nans: 0,
            candidates: Vec::new(),
        };
        if self.shard.is_empty() {
            return empty;
        }
        let local = match self.block.count_at_or_below(thr.index) {
            // Every local element comes after the threshold: a tie no longer passes.
            0 => match thr.key.successor() {
                Some(key) => sample::Threshold {
                    key,
                    index: self.block.len(),
                },
                None => return empty,
            },
            split => sample::Threshold {
                key: thr.key,
                index: split - 1,
            },
        };
        filter::filter::<T, MAG>(self.shard, local, capacity)
    }

    /// Stage 4: every rank's candidates at `local` positions of its block, on every rank.
    fn gather_candidates<const MAG: bool>(
        &mut self,
        local: &[u64],
    ) -> Result<Vec<Ranked<<T as Element>::Key, T>>> {
        let per = candidate_bytes(T::BYTES);
        let mut msg = Vec::with_capacity(local.len() * per);
        for &l in local {
            msg.extend_from_slice(&self.block.global(l).to_le_bytes());
            self.shard[l as usize].put(&mut msg);
        }
        let all = self.gather(&msg)?;
        let mut out = Vec::with_capacity(all.iter().map(|m| m.len() / per).sum());
        for (r, m) in all.iter().enumerate() {
            if m.len() % per != 0 {
                return Err(Error::Param(format!(
                    "rank {r} sent {} candidate bytes, not a multiple of {per}",
                    m.len()
                )));
            }
            for c in m.chunks_exact(per) {
                let mut g = [0u8; 8];
                g.copy_from_slice(&c[..8]);
                let x = T::get(&c[8..]);
                out.push((x.key::<MAG>(), u64::from_le_bytes(g), x));
            }
        }
        Ok(out)
    }

    /// The fallback (and the path without sampling): every rank's exact local top-k hold the global
    /// top-k.
    fn gather_local_tops<const MAG: bool>(&mut self) -> Result<Sharded<T>> {
        if self.nan_error {
            let mut nans = [self.shard.iter().filter(|x| x.is_nan_value()).count() as u64];
            self.reduce(&mut nans)?;
            if nans[0] > 0 {
                return Err(self.nan_report()?);
            }
        }
        let local = exact::<T, MAG>(self.shard, self.k.min(self.shard.len()), Order::Index);
        let all = self.gather_candidates::<MAG>(&local)?;
        Ok(self.cut(all))
    }

    /// The exact top k of the gathered candidates, ties by lowest global index.
    fn cut(&mut self, mut all: Vec<Ranked<<T as Element>::Key, T>>) -> Sharded<T> {
        let by_rank = |a: &Ranked<_, T>, b: &Ranked<_, T>| rank_order(&(a.0, a.1), &(b.0, b.1));
        if self.k < all.len() {
            all.select_nth_unstable_by(self.k - 1, by_rank);
            all.truncate(self.k);
        }
        match self.order {
            Order::Desc => all.sort_unstable_by(by_rank),
            Order::Index => all.sort_unstable_by_key(|c| c.1),
        }
        self.finish(all)
    }

    fn finish(&mut self, chosen: Vec<Ranked<<T as Element>::Key, T>>) -> Sharded<T> {
        Sharded {
            indices: chosen.iter().map(|c| c.1).collect(),
            values: chosen.iter().map(|c| c.2).collect(),
            stats: std::mem::take(&mut self.stats),
        }
    }

    /// The NaN error of the whole matrix: the count over all ranks and the lowest global index.
    fn nan_report(&mut self) -> Result<Error> {
        let mut count = 0u64;
        let mut first = u64::MAX;
        for (l, x) in self.shard.iter().enumerate() {
            if x.is_nan_value() {
                count += 1;
                first = first.min(self.block.global(l as u64));
            }
        }
        let mut msg = count.to_le_bytes().to_vec();
        msg.extend_from_slice(&first.to_le_bytes());
        let all = self.gather(&msg)?;
        let (mut count, mut first) = (0u64, u64::MAX);
        for m in all.iter().filter(|m| m.len() == 16) {
            count += u64::from_le_bytes(m[..8].try_into().unwrap_or([0; 8]));
            first = first.min(u64::from_le_bytes(m[8..].try_into().unwrap_or([0xff; 8])));
        }
        Ok(Error::NaN {
            count: count as usize,
            first: first as usize,
        })
    }

    fn gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let started = Instant::now();
        let all = self
            .ex
            .all_gather(mine)
            .map_err(|e| exchange_error(self.ex.rank(), "all-gather", e))?;
        self.stats.time_collectives += started.elapsed();
        self.stats.bytes_sent += mine.len() as u64;
        self.stats.bytes_gathered += all.iter().map(|m| m.len() as u64).sum::<u64>();
        if all.len() != self.ex.world() {
            return Err(Error::Param(format!(
                "the all-gather returned {} messages for {} ranks",
                all.len(),
                self.ex.world()
            )));
        }
        Ok(all)
    }

    fn reduce(&mut self, counts: &mut [u64]) -> Result<()> {
        let started = Instant::now();
        self.ex
            .all_reduce_sum(counts)
            .map_err(|e| exchange_error(self.ex.rank(), "all-reduce", e))?;
        self.stats.time_collectives += started.elapsed();
        self.stats.bytes_sent += 8 * counts.len() as u64;
        Ok(())
    }
}

fn exchange_error(rank: usize, what: &str, e: ExchangeError) -> Error {
    Error::Param(format!(
        "rank {rank}: the {what} of the sharded selection failed: {e}"
    ))
}
