//! The test double: ranks as threads of one process, meeting at a shared rendezvous.
//!
//! No transport for users: it exists so that tests in CI run the rank logic of the distributed code
//! (which ranks call what, with which buffers) without GPUs. Every collective is an all-gather of
//! bytes through a mutex; sums are then taken in rank order, as [`Collective`] promises.

use crate::{Collective, Error, Result};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a rank waits at a collective for the others before the call fails naming them.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One rank of a group of threads. Build the group with [`ThreadCollective::group`] and move one
/// member into each thread.
#[derive(Clone)]
pub struct ThreadCollective {
    rank: usize,
    shared: Arc<Shared>,
}

struct Shared {
    world: usize,
    timeout: Duration,
    state: Mutex<Round>,
    arrived: Condvar,
}

/// The round in progress and the outcome of the last completed one.
struct Round {
    /// Completed rounds; a rank waiting on round g is released when this passes g.
    generation: u64,
    /// Payloads of the round in progress, by rank.
    pending: Vec<Option<Vec<u8>>>,
    /// Every rank's payload of the last completed round.
    last: Arc<Vec<Vec<u8>>>,
}

impl ThreadCollective {
    /// `world` members, rank 0 first, whose calls time out after 60 s.
    pub fn group(world: usize) -> Vec<ThreadCollective> {
        Self::group_with_timeout(world, DEFAULT_TIMEOUT)
    }

    /// `world` members whose calls fail after waiting `timeout` for the other ranks.
    pub fn group_with_timeout(world: usize, timeout: Duration) -> Vec<ThreadCollective> {
        let shared = Arc::new(Shared {
            world,
            timeout,
            state: Mutex::new(Round {
                generation: 0,
                pending: vec![None; world],
                last: Arc::new(Vec::new()),
            }),
            arrived: Condvar::new(),
        });
        (0..world)
            .map(|rank| ThreadCollective {
                rank,
                shared: Arc::clone(&shared),
            })
            .collect()
    }

    /// Runs `f(member)` on one thread per rank and returns the results in rank order; a panicking
    /// rank panics the caller once every thread has finished.
    pub fn run<R: Send>(world: usize, f: impl Fn(ThreadCollective) -> R + Sync) -> Vec<R> {
        let f = &f;
        std::thread::scope(|scope| {
            let handles: Vec<_> = Self::group(world)
                .into_iter()
                .map(|member| scope.spawn(move || f(member)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    }

    fn lock(&self) -> MutexGuard<'_, Round> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Deposits `mine` and returns every rank's payload of this round.
    fn exchange(&self, mine: Vec<u8>) -> Result<Arc<Vec<Vec<u8>>>> {
        let world = self.shared.world;
        let mut round = self.lock();
        if round.pending[self.rank].is_some() {
            return Err(Error::Call(format!(
                "rank {} entered a collective twice",
                self.rank
            )));
        }
        round.pending[self.rank] = Some(mine);
        let generation = round.generation;
        if round.pending.iter().all(Option::is_some) {
            let payloads: Vec<Vec<u8>> = round
                .pending
                .iter_mut()
                .map(|p| p.take().unwrap_or_default())
                .collect();
            round.last = Arc::new(payloads);
            round.generation += 1;
            self.shared.arrived.notify_all();
            return Ok(Arc::clone(&round.last));
        }
        let deadline = Instant::now() + self.shared.timeout;
        while round.generation == generation {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // The group is unusable from here on: the payload stays, so that every rank
                // that times out names the same missing ranks.
                let missing = (0..world).filter(|&r| round.pending[r].is_none()).collect();
                return Err(Error::Timeout {
                    missing,
                    world,
                    seconds: self.shared.timeout.as_secs_f64(),
                });
            }
            round = self
                .shared
                .arrived
                .wait_timeout(round, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        // The next round cannot complete before this rank joins it, so `last` is this round's.
        Ok(Arc::clone(&round.last))
    }

    fn all_reduce_sum<T: bytemuck::Pod + std::ops::AddAssign>(&self, buf: &mut [T]) -> Result<()> {
        let all = self.exchange(bytemuck::cast_slice(buf).to_vec())?;
        let mut sum = vec![T::zeroed(); buf.len()];
        for (rank, bytes) in all.iter().enumerate() {
            if bytes.len() != size_of_val(buf) {
                return Err(Error::Call(format!(
                    "all-reduce of {} elements on rank {}, of {} bytes on rank {rank}",
                    buf.len(),
                    self.rank,
                    bytes.len()
                )));
            }
            let theirs: Vec<T> = bytemuck::pod_collect_to_vec(bytes);
            sum.iter_mut().zip(theirs).for_each(|(s, x)| *s += x);
        }
        buf.copy_from_slice(&sum);
        Ok(())
    }
}

impl Collective for ThreadCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.shared.world
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        self.all_reduce_sum(buf)
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        self.all_reduce_sum(buf)
    }

    fn all_reduce_sum_u64(&self, buf: &mut [u64]) -> Result<()> {
        self.all_reduce_sum(buf)
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(self.exchange(mine.to_vec())?.as_ref().clone())
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let world = self.shared.world;
        if root >= world {
            return Err(Error::Call(format!(
                "broadcast from rank {root} in a group of {world}"
            )));
        }
        let mine = if self.rank == root {
            buf.clone()
        } else {
            Vec::new()
        };
        let all = self.exchange(mine)?;
        buf.clone_from(&all[root]);
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        self.exchange(Vec::new()).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_gathers_and_broadcasts_agree_on_every_rank() {
        let out = ThreadCollective::run(3, |c| {
            let r = c.rank();
            let mut f = vec![r as f32, 1.0];
            c.all_reduce_sum_f32(&mut f).unwrap();
            let mut u = vec![1u64 << r];
            c.all_reduce_sum_u64(&mut u).unwrap();
            let mut d = vec![0.5f64 * r as f64];
            c.all_reduce_sum_f64(&mut d).unwrap();
            let gathered = crate::all_gather(&c, &vec![r as u32; r]).unwrap();
            let mut b = if r == 2 { vec![7, 8, 9] } else { vec![1] };
            c.broadcast_bytes(2, &mut b).unwrap();
            c.barrier().unwrap();
            (f, u, d, gathered, b)
        });
        for (f, u, d, gathered, b) in out {
            assert_eq!(f, vec![3.0, 3.0]);
            assert_eq!(u, vec![7]);
            assert_eq!(d, vec![1.5]);
            assert_eq!(gathered, vec![vec![], vec![1], vec![2, 2]]);
            assert_eq!(b, vec![7, 8, 9]);
        }
    }

    #[test]
    fn many_rounds_in_a_row_stay_in_step() {
        let out = ThreadCollective::run(4, |c| {
            (0..500u64)
                .map(|i| {
                    let mut x = [i + c.rank() as u64];
                    c.all_reduce_sum_u64(&mut x).unwrap();
                    x[0]
                })
                .sum::<u64>()
        });
        let expect: u64 = (0..500u64).map(|i| 4 * i + 6).sum();
        assert!(out.iter().all(|&s| s == expect), "{out:?}");
    }

    #[test]
    fn a_missing_rank_is_named_within_the_timeout() {
        let group = ThreadCollective::group_with_timeout(3, Duration::from_millis(200));
        let started = Instant::now();
        let errors: Vec<String> = std::thread::scope(|s| {
            let waiting: Vec<_> = group[..2]
                .iter()
                .map(|c| s.spawn(move || c.barrier().unwrap_err().to_string()))
                .collect();
            waiting.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(started.elapsed() < Duration::from_secs(5));
        for e in errors {
            assert!(e.contains("[2]"), "{e}");
        }
    }

    #[test]
    fn mismatched_lengths_are_an_error() {
        let out = ThreadCollective::run(2, |c| {
            let mut x = vec![0u64; c.rank() + 1];
            c.all_reduce_sum_u64(&mut x).is_err()
        });
        assert_eq!(out, vec![true, true]);
    }
}
