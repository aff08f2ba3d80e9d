//! Rank 0's bytes (NCCL's unique id) to every other rank, over TCP.
//!
//! Rank 0 listens on MASTER_PORT; every other rank connects to MASTER_ADDR:MASTER_PORT, retrying
//! until the timeout, and says who it is. Once all have arrived rank 0 sends the payload, waits for
//! every rank's acknowledgement and releases them together. A rank that never arrives, or drops its
//! connection before acknowledging, fails the exchange on rank 0 within the timeout; rank 0 then
//! tells the ranks still connected which rank it was, so every rank's error names it. The other
//! ranks wait up to [`VERDICT_GRACE`] past their own timeout for that verdict, since rank 0 may have
//! started after them.
//!
//! The payload is opaque bytes, so the exchange runs (and is tested) without a GPU.

use crate::{Error, Result, WorldEnv};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long past its own timeout a rank waits for rank 0's verdict.
pub const VERDICT_GRACE: Duration = Duration::from_secs(2);
/// First bytes of every connecting rank's greeting.
const MAGIC: &[u8; 8] = b"STBOOT01";
/// The payload follows.
const TAG_PAYLOAD: u8 = 1;
/// The exchange failed; a message naming the rank follows.
const TAG_ABORT: u8 = 2;
/// Every rank has its payload.
const TAG_GO: u8 = 3;
const ACK: u8 = 0xA5;
/// Pause between attempts to reach rank 0, and between polls for arriving ranks.
const RETRY: Duration = Duration::from_millis(50);
/// Longest payload or abort message accepted.
const MAX_MESSAGE: u32 = 1 << 20;

/// Where and how long the ranks meet.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    /// Host of rank 0, as the other ranks reach it.
    pub addr: String,
    /// Port rank 0 listens on.
    pub port: u16,
    pub rank: usize,
    pub world: usize,
    /// How long rank 0 waits for every rank to arrive and acknowledge, and how long the others
    /// keep trying to reach it.
    pub timeout: Duration,
}

impl Rendezvous {
    pub fn from_env(env: &WorldEnv, timeout: Duration) -> Rendezvous {
        Rendezvous {
            addr: env.master_addr.clone(),
            port: env.master_port,
            rank: env.rank,
            world: env.world,
            timeout,
        }
    }

    fn fail(&self, reason: impl Into<String>) -> Error {
        Error::Bootstrap {
            rank: self.rank,
            world: self.world,
            reason: reason.into(),
        }
    }
}

/// Rank 0's `make()` on every rank. `make` runs on rank 0 only, before it listens.
pub fn share_from_root(rv: &Rendezvous, make: impl FnOnce() -> Result<Vec<u8>>) -> Result<Vec<u8>> {
    if rv.world == 0 || rv.rank >= rv.world {
        return Err(rv.fail("the rank must lie below a world size of at least 1"));
    }
    if rv.rank == 0 {
        let payload = make()?;
        if payload.len() > MAX_MESSAGE as usize {
            return Err(rv.fail(format!("payload of {} bytes is too long", payload.len())));
        }
        if rv.world > 1 {
            serve(rv, &payload)?;
        }
        Ok(payload)
    } else {
        receive(rv)
    }
}

/// Rank 0: gather every rank's connection, hand out the payload, release everyone together.
fn serve(rv: &Rendezvous, payload: &[u8]) -> Result<()> {
    let deadline = Instant::now() + rv.timeout;
    let listener = TcpListener::bind(("0.0.0.0", rv.port)).map_err(|e| {
        rv.fail(format!(
            "cannot listen on port {} (MASTER_PORT): {e}",
            rv.port
        ))
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| rv.fail(format!("listener: {e}")))?;
    let mut peers: Vec<Option<TcpStream>> = (0..rv.world).map(|_| None).collect();
    let arrived = |peers: &[Option<TcpStream>]| peers.iter().skip(1).all(Option::is_some);
    while !arrived(&peers) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(reason) = greet(rv, stream, deadline, &mut peers) {
                    return Err(abort(rv, &mut peers, reason));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<usize> =
                        (1..rv.world).filter(|&r| peers[r].is_none()).collect();
                    let reason = format!(
                        "rank(s) {missing:?} did not arrive at {}:{} within {:.1} s",
                        rv.addr,
                        rv.port,
                        rv.timeout.as_secs_f64()
                    );
                    return Err(abort(rv, &mut peers, reason));
                }
                std::thread::sleep(RETRY.min(deadline.saturating_duration_since(Instant::now())));
            }
            Err(e) => return Err(abort(rv, &mut peers, format!("accept: {e}"))),
        }
    }
    // Every rank acknowledges its payload before any is released: a rank that drops out here is
    // named to the others instead of leaving them inside NCCL's initialization.
    let ack_deadline = deadline.max(Instant::now() + VERDICT_GRACE);
    for r in 1..rv.world {
        let sent = peers[r].as_mut().map(|s| send(s, TAG_PAYLOAD, payload));
        let acked = sent.and_then(|sent| {
            sent.ok()?;
            let s = peers[r].as_mut()?;
            read_byte(s, ack_deadline).ok().filter(|&b| b == ACK)
        });
        if acked.is_none() {
            peers[r] = None;
            let reason = format!("rank {r} dropped out before acknowledging the payload");
            return Err(abort(rv, &mut peers, reason));
        }
    }
    for s in peers.iter_mut().flatten() {
        // A rank that vanishes now has its payload; its absence surfaces in the first collective.
        let _ = send(s, TAG_GO, &[]);
    }
    Ok(())
}

/// Reads one arriving rank's greeting and files its connection. An error ends the exchange.
fn greet(
    rv: &Rendezvous,
    mut stream: TcpStream,
    deadline: Instant,
    peers: &mut [Option<TcpStream>],
) -> std::result::Result<(), String> {
    stream
        .set_nonblocking(false)
        .map_err(|e| format!("connection: {e}"))?;
    let mut hello = [0u8; 16];
    read_exact_by(
        &mut stream,
        &mut hello,
        deadline.max(Instant::now() + RETRY * 10),
    )
    .map_err(|e| format!("a connecting rank sent no greeting: {e}"))?;
    if &hello[..8] != MAGIC {
        return Err(format!(
            "a connection to port {} is not a rank of this job",
            rv.port
        ));
    }
    let rank = u32::from_le_bytes([hello[8], hello[9], hello[10], hello[11]]) as usize;
    let world = u32::from_le_bytes([hello[12], hello[13], hello[14], hello[15]]) as usize;
    if world != rv.world {
        return Err(format!(
            "rank {rank} believes the world has {world} ranks, rank 0 {}",
            rv.world
        ));
    }
    if rank == 0 || rank >= rv.world {
        return Err(format!("a peer claims rank {rank} in a world of {world}"));
    }
    if peers[rank].is_some() {
        return Err(format!("rank {rank} arrived twice"));
    }
    peers[rank] = Some(stream);
    Ok(())
}

/// Tells every connected rank why the exchange failed; returns rank 0's error.
fn abort(rv: &Rendezvous, peers: &mut [Option<TcpStream>], reason: String) -> Error {
    for s in peers.iter_mut().flatten() {
        let _ = send(s, TAG_ABORT, reason.as_bytes());
    }
    rv.fail(reason)
}

/// Any rank but 0: reach rank 0, say who we are, take the payload, acknowledge, wait for release.
fn receive(rv: &Rendezvous) -> Result<Vec<u8>> {
    let started = Instant::now();
    let deadline = started + rv.timeout;
    let mut stream = connect(rv, deadline)?;
    let mut hello = Vec::with_capacity(16);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&(rv.rank as u32).to_le_bytes());
    hello.extend_from_slice(&(rv.world as u32).to_le_bytes());
    stream
        .write_all(&hello)
        .map_err(|e| rv.fail(format!("greeting rank 0: {e}")))?;
    let verdict = deadline + VERDICT_GRACE;
    let payload = match read_message(&mut stream, verdict) {
        Ok((TAG_PAYLOAD, payload)) => payload,
        Ok((TAG_ABORT, why)) => return Err(rv.fail(String::from_utf8_lossy(&why))),
        Ok((tag, _)) => return Err(rv.fail(format!("unexpected message {tag} from rank 0"))),
        Err(e) => return Err(rv.fail(format!("no payload from rank 0: {e}"))),
    };
    stream
        .write_all(&[ACK])
        .map_err(|e| rv.fail(format!("acknowledging to rank 0: {e}")))?;
    match read_message(&mut stream, verdict.max(Instant::now() + VERDICT_GRACE)) {
        Ok((TAG_GO, _)) => Ok(payload),
        Ok((TAG_ABORT, why)) => Err(rv.fail(String::from_utf8_lossy(&why))),
        Ok((tag, _)) => Err(rv.fail(format!("unexpected message {tag} from rank 0"))),
        Err(e) => Err(rv.fail(format!("rank 0 did not release the ranks: {e}"))),
    }
}

/// Connects to rank 0, retrying until `deadline` (rank 0 may not listen yet).
fn connect(rv: &Rendezvous, deadline: Instant) -> Result<TcpStream> {
    let mut last = String::from("no attempt");
    loop {
        match (rv.addr.as_str(), rv.port).to_socket_addrs() {
            Ok(addrs) => {
                for addr in addrs {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match TcpStream::connect_timeout(&addr, left.max(RETRY)) {
                        Ok(s) => return Ok(s),
                        Err(e) => last = format!("{addr}: {e}"),
                    }
                }
            }
            Err(e) => last = format!("resolving MASTER_ADDR {:?}: {e}", rv.addr),
        }
        if Instant::now() >= deadline {
            return Err(rv.fail(format!(
                "rank 0 at {}:{} could not be reached within {:.1} s ({last})",
                rv.addr,
                rv.port,
                rv.timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(RETRY);
    }
}

fn send(stream: &mut TcpStream, tag: u8, body: &[u8]) -> std::io::Result<()> {
    let mut msg = Vec::with_capacity(5 + body.len());
    msg.push(tag);
    msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    msg.extend_from_slice(body);
    stream.write_all(&msg)
}

fn read_message(stream: &mut TcpStream, deadline: Instant) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    read_exact_by(stream, &mut head, deadline)?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    if len > MAX_MESSAGE {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("message of {len} bytes"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    read_exact_by(stream, &mut body, deadline)?;
    Ok((head[0], body))
}

fn read_byte(stream: &mut TcpStream, deadline: Instant) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    read_exact_by(stream, &mut b, deadline)?;
    Ok(b[0])
}

/// `read_exact` that gives up at `deadline` with `TimedOut`.
fn read_exact_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(ErrorKind::TimedOut, "timed out"));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "connection closed",
                ))
            }
            Ok(n) => filled += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn rendezvous(port: u16, rank: usize, world: usize) -> Rendezvous {
        Rendezvous {
            addr: "127.0.0.1".into(),
            port,
            rank,
            world,
            timeout: Duration::from_secs(2),
        }
    }

    /// A rank that greets and then disconnects before acknowledging is named to every other rank.
    #[test]
    fn a_rank_dropping_out_after_its_greeting_is_named() {
        let port = free_port();
        let errors: Vec<String> = std::thread::scope(|s| {
            let root = s.spawn(|| share_from_root(&rendezvous(port, 0, 3), || Ok(vec![9; 128])));
            let one = s.spawn(|| share_from_root(&rendezvous(port, 1, 3), || unreachable!()));
            let mut quitter = connect(
                &rendezvous(port, 2, 3),
                Instant::now() + Duration::from_secs(2),
            )
            .unwrap();
            let mut hello = MAGIC.to_vec();
            hello.extend_from_slice(&2u32.to_le_bytes());
            hello.extend_from_slice(&3u32.to_le_bytes());
            quitter.write_all(&hello).unwrap();
            drop(quitter);
            [root.join().unwrap(), one.join().unwrap()]
                .into_iter()
                .map(|r| r.unwrap_err().to_string())
                .collect()
        });
        for e in errors {
            assert!(e.contains("rank 2 dropped out"), "{e}");
        }
    }

    #[test]
    fn a_single_rank_needs_no_network() {
        let rv = rendezvous(1, 0, 1);
        assert_eq!(share_from_root(&rv, || Ok(vec![1, 2])).unwrap(), vec![1, 2]);
    }
}
