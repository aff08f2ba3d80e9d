//! NCCL at world size 1 on GPU 0: every call of the trait returns this rank's own data.
#![cfg(feature = "cuda")]

use collective::{Collective, Launcher, NcclCollective, WorldEnv};
use std::time::Duration;

#[test]
fn one_rank_collectives_return_its_own_data() -> Result<(), Box<dyn std::error::Error>> {
    let stream = cudarc::driver::CudaContext::new(0)?.default_stream();
    let env = WorldEnv {
        rank: 0,
        world: 1,
        local_rank: 0,
        master_addr: "127.0.0.1".into(),
        master_port: 29_500,
        launcher: Launcher::Torchrun,
    };
    let c = NcclCollective::connect(&env, stream, Duration::from_secs(10))?;
    assert_eq!((c.rank(), c.world()), (0, 1));
    let mut f = vec![1.5f32, -2.0];
    c.all_reduce_sum_f32(&mut f)?;
    assert_eq!(f, vec![1.5, -2.0]);
    let mut u = vec![7u64];
    c.all_reduce_sum_u64(&mut u)?;
    assert_eq!(u, vec![7]);
    assert_eq!(c.all_gather_bytes(&[1, 2, 3])?, vec![vec![1, 2, 3]]);
    let mut b = vec![9u8; 5];
    c.broadcast_bytes(0, &mut b)?;
    assert_eq!(b, vec![9; 5]);
    c.barrier()?;
    Ok(())
}
