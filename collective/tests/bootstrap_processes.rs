//! The unique id's bootstrap between real processes: this test binary starts copies of itself as the
//! ranks of a job (torchrun's variables in their environment) and checks what each reports.

use collective::{share_from_root, Rendezvous, WorldEnv};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the environment of a copy that plays one rank.
const ROLE: &str = "COLLECTIVE_TEST_RANK_PROCESS";
/// The ranks' bootstrap timeout.
const TIMEOUT: Duration = Duration::from_secs(3);

fn main() {
    if std::env::var_os(ROLE).is_some() {
        std::process::exit(play_rank());
    }
    every_rank_receives_rank_0s_id();
    println!("every_rank_receives_rank_0s_id ... ok");
    a_rank_that_never_arrives_is_named_within_the_timeout();
    println!("a_rank_that_never_arrives_is_named_within_the_timeout ... ok");
    a_missing_rank_0_is_named_within_the_timeout();
    println!("a_missing_rank_0_is_named_within_the_timeout ... ok");
}

/// One rank: bootstrap from the environment, print the id (or the error), exit 0 (or 1).
fn play_rank() -> i32 {
    let outcome = WorldEnv::from_process().and_then(|env| {
        let env = env.ok_or_else(|| collective::Error::Call("no launcher variables".into()))?;
        let rv = Rendezvous::from_env(&env, TIMEOUT);
        // A 128-byte id that differs from run to run, as NCCL's does.
        share_from_root(&rv, || {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            let seed = u64::from(std::process::id()) ^ now.map_or(0, |d| d.as_nanos() as u64);
            Ok((0..128u64)
                .map(|i| {
                    let x = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    (x.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 56) as u8
                })
                .collect())
        })
    });
    match outcome {
        Ok(id) => {
            println!(
                "ID {}",
                id.iter().map(|b| format!("{b:02x}")).collect::<String>()
            );
            0
        }
        Err(e) => {
            println!("ERR {e}");
            1
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

fn spawn_rank(rank: usize, world: usize, port: u16) -> Child {
    Command::new(std::env::current_exe().expect("the test binary's path"))
        .env(ROLE, "1")
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting a rank process")
}

/// Each started rank's exit success and its single line of output, in the order given.
fn outcomes(children: Vec<Child>) -> Vec<(bool, String)> {
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("a rank's output");
            let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.success(), line)
        })
        .collect()
}

fn every_rank_receives_rank_0s_id() {
    let port = free_port();
    // Rank 0 last: the others must wait for it to listen.
    let children = (0..4).rev().map(|r| spawn_rank(r, 4, port)).collect();
    let out = outcomes(children);
    for (ok, line) in &out {
        assert!(ok, "a rank failed: {line}");
        assert!(line.starts_with("ID ") && line.len() == 3 + 256, "{line}");
    }
    assert!(
        out.iter().all(|(_, l)| *l == out[0].1),
        "ids differ: {out:?}"
    );
}

fn a_rank_that_never_arrives_is_named_within_the_timeout() {
    let port = free_port();
    let started = Instant::now();
    let out = outcomes((0..2).map(|r| spawn_rank(r, 3, port)).collect());
    let took = started.elapsed();
    assert!(
        took < TIMEOUT + collective::bootstrap::VERDICT_GRACE + Duration::from_secs(2),
        "{took:?}"
    );
    for (ok, line) in out {
        assert!(!ok, "{line}");
        assert!(line.contains("rank(s) [2] did not arrive"), "{line}");
    }
}

fn a_missing_rank_0_is_named_within_the_timeout() {
    let port = free_port();
    let started = Instant::now();
    let out = outcomes((1..3).map(|r| spawn_rank(r, 3, port)).collect());
    assert!(started.elapsed() < TIMEOUT + Duration::from_secs(2));
    for (ok, line) in out {
        assert!(!ok, "{line}");
        assert!(line.contains("rank 0 at 127.0.0.1"), "{line}");
    }
}
