//! sha256 throughput of the shard check, one thread and one per core, to set against the rate training
//! reads shards at (d = 1600 bf16 at 3e5 tokens/s is 0.96 GB/s).
//!
//!     cargo run --release -p activations --features bench --example hash_rate [MiB per thread, default 1024]
use sha2::{Digest, Sha256};
use std::time::Instant;

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1024);
    let data: Vec<u8> = (0..mib << 20)
        .map(|i| ((i * 2654435761usize) >> 13) as u8)
        .collect();
    let t = Instant::now();
    let one = Sha256::digest(&data);
    let single = data.len() as f64 / t.elapsed().as_secs_f64() / 1e9;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| Sha256::digest(&data));
        }
    });
    let all = (threads * data.len()) as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!("| sha256 (sha2 crate) | 1 thread | {threads} threads |");
    println!("|---|---|---|");
    println!("| GB/s over {mib} MiB | {single:.2} | {all:.2} |");
    println!("(digest {})", hex::encode(&one[..4]));
}
