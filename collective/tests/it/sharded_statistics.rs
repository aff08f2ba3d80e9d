//! The sharded plan's first attempts fail as often as the single-device rule predicts: the pooled
//! sample is one uniform sample of the whole matrix, so R does not depend on how it is sharded.

use collective::{AsExchange, Collective, ThreadCollective};
use profk::epsilon::Band;
use profk::sharded::{self, Block};
use profk::Plan;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A sample of 512 from 2^14 at ε = 0.3 fails often enough to count: over 2000 first attempts on
/// 3 ranks with uneven blocks, the counts of R < k and R > M lie in the 3σ bands of the exact
/// probabilities; R equals that of one rank for every seed; a threshold rank two off is caught.
#[test]
fn first_attempt_failures_match_the_plan_at_every_world_size() {
    let n: u64 = 1 << 14;
    let k = 512;
    let p = profk::params::exact(n, k, 0.3, Some(512)).unwrap();
    assert!(p.p_recall_fail > 0.05 && p.p_overflow > 0.05, "{p:?}");
    let plan = Plan::from(p);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // Few distinct levels: ties decided by the global index everywhere.
    let data: Vec<f32> = (0..n).map(|_| rng.random_range(0..64) as f32).collect();
    let attempts: u64 = 2000;
    let bounds = [(0, 1000), (1000, 0), (1000, n - 1000)];
    let retained_on = |world: usize| -> Vec<u64> {
        ThreadCollective::run(world, |c| {
            let (offset, len) = if world == 1 { (0, n) } else { bounds[c.rank()] };
            let shard = &data[offset as usize..(offset + len) as usize];
            let block = Block::range(n, offset, len);
            (0..attempts)
                .map(|seed| {
                    sharded::first_attempt_retained(c.as_exchange(), shard, block, plan, seed)
                        .unwrap()
                })
                .collect::<Vec<u64>>()
        })
        .swap_remove(0)
    };
    let three = retained_on(3);
    assert_eq!(three, retained_on(1), "R differs between 3 ranks and 1");
    let recall_failures = three.iter().filter(|&&r| r < k).count() as u64;
    let overflows = three.iter().filter(|&&r| r > p.capacity).count() as u64;
    let recall = Band::new(attempts, p.p_recall_fail, recall_failures);
    let overflow = Band::new(attempts, p.p_overflow, overflows);
    assert!(recall.holds(), "R < k: {recall:?}");
    assert!(overflow.holds(), "R > M: {overflow:?}");
    let (off, _) = profk::params::failure_probabilities(n, k, p.sample, p.t + 2, p.capacity);
    assert!(
        !Band::new(attempts, off, recall_failures).holds(),
        "a threshold rank two off the plan's goes unnoticed"
    );
}
