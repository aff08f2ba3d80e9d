//! The local launcher on shell commands as ranks: the environment each gets, a failing rank named
//! and the others stopped, ranks left hanging named after the timeout.
use collective::launch::run_local;
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

fn sh(script: &str, nproc: usize, timeout: Duration) -> collective::Result<i32> {
    let args: Vec<OsString> = vec!["-c".into(), script.into()];
    run_local(nproc, Path::new("/bin/sh"), &args, timeout)
}

#[test]
fn every_rank_gets_the_torchrun_variables() {
    let script = r#"test "$WORLD_SIZE" = 3 && test "$LOCAL_RANK" = "$RANK" && test "$RANK" -lt 3 \
        && test "$MASTER_ADDR" = 127.0.0.1 && test "$MASTER_PORT" -gt 0"#;
    assert_eq!(sh(script, 3, Duration::from_secs(30)).unwrap(), 0);
}

#[test]
fn a_failing_rank_is_named_and_the_others_stopped() {
    let started = Instant::now();
    let err = sh(
        r#"if [ "$RANK" = 2 ]; then exit 3; fi; sleep 60"#,
        4,
        Duration::from_secs(60),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("rank 2 of 4") && err.contains("exit code 3"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn ranks_left_running_past_the_timeout_are_named() {
    let started = Instant::now();
    let err = sh(
        r#"if [ "$RANK" = 0 ]; then exit 0; fi; sleep 60"#,
        3,
        Duration::from_millis(300),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("[1, 2]"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));
}
