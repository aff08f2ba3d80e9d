//! The `profk select` command: a round trip through safetensors files, and errors that leave no file.
use anyhow::{ensure, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

fn profk(args: &[&str]) -> Result<Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_profk"))
        .args(args)
        .output()?)
}

/// `profk` that must succeed; its stderr is the message when it does not.
fn profk_ok(args: &[&str]) -> Result<Output> {
    let run = profk(args)?;
    ensure!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    Ok(run)
}

fn save(path: &Path, tensors: &[(&str, Tensor)]) -> Result<()> {
    let map: HashMap<String, Tensor> = tensors
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    candle_core::safetensors::save(&map, path)?;
    Ok(())
}

#[test]
fn select_round_trip() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("in.safetensors");
    let x = Tensor::new(
        &[
            [1f32, 5.0, 3.0, 5.0, f32::NEG_INFINITY],
            [0.0, -1.0, 2.0, 2.0, 7.0],
        ],
        &Device::Cpu,
    )?
    .to_dtype(DType::BF16)?;
    save(
        &input,
        &[
            ("scores", x.clone()),
            ("other", Tensor::zeros(3, DType::F32, &Device::Cpu)?),
        ],
    )?;
    let output = dir.path().join("out.safetensors");
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    // Row 0 by value: 5 (1), 5 (3), 3 (2); row 1: 7 (4), 2 (2), 2 (3); flat: 7 (9), 5 (1), 5 (3).
    for (mode, order, want) in [
        ("rowwise", "desc", vec![1i64, 3, 2, 4, 2, 3]),
        ("rowwise", "index", vec![1, 2, 3, 2, 3, 4]),
        ("flat", "desc", vec![9, 1, 3]),
    ] {
        let args = [
            "select", "--input", i, "--tensor", "scores", "--k", "3", "--mode", mode,
        ];
        profk_ok(&[&args[..], &["--order", order, "--output", o]].concat())?;
        let out = candle_core::safetensors::load(&output, &Device::Cpu)?;
        let (values, indices) = (&out["values"], &out["indices"]);
        ensure!(values.dtype() == DType::BF16 && indices.dtype() == DType::I64);
        let idx: Vec<i64> = indices.flatten_all()?.to_vec1()?;
        ensure!(idx == want, "{mode} {order}: {idx:?} != {want:?}");
        let flat: Vec<f32> = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        let vals: Vec<f32> = values.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        for (j, (&ix, &v)) in idx.iter().zip(&vals).enumerate() {
            let base = if mode == "flat" { 0 } else { (j / 3) * 5 };
            ensure!(flat[base + ix as usize] == v, "value {j}");
        }
    }
    // A 1-D input is one row.
    save(
        &input,
        &[("v", Tensor::new(&[2f64, 9.0, 4.0], &Device::Cpu)?)],
    )?;
    profk_ok(&[
        "select", "--input", i, "--tensor", "v", "--k", "2", "--output", o,
    ])?;
    let out = candle_core::safetensors::load(&output, &Device::Cpu)?;
    ensure!(out["indices"].to_vec1::<i64>()? == vec![1, 2]);
    ensure!(out["values"].to_vec1::<f64>()? == vec![9.0, 4.0]);
    // --stats says what the selector did: one row, selected exactly (too short to sample).
    let run = profk_ok(&[
        "select", "--input", i, "--tensor", "v", "--k", "2", "--output", o, "--stats",
    ])?;
    let said = String::from_utf8_lossy(&run.stdout);
    ensure!(
        said.contains("selections       1 (exact without sampling: 1)")
            && said.contains("misses           R < k: 0, R > M: 0")
            && !said.contains("SelectStats"),
        "{said}"
    );
    Ok(())
}

#[test]
fn errors_exit_nonzero_with_one_line_and_leave_no_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("in.safetensors");
    save(
        &input,
        &[("x", Tensor::new(&[1f32, f32::NAN, 3.0], &Device::Cpu)?)],
    )?;
    let output = dir.path().join("out.safetensors");
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    let missing = dir.path().join("missing.safetensors");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--tensor", "x", "--k", "4"], "exceeds"),
        (vec!["--tensor", "x", "--k", "1"], "NaN"),
        (vec!["--tensor", "y", "--k", "1"], "no tensor 'y'"),
        (
            vec!["--tensor", "x", "--k", "1", "--device", "cuda"],
            "cuda",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["select", "--input", i, "--output", o];
        args.extend(extra.iter().copied());
        let run = profk(&args)?;
        let err = String::from_utf8_lossy(&run.stderr);
        if needle == "cuda" && run.status.success() {
            continue; // a build with the cuda feature and a GPU
        }
        ensure!(!run.status.success(), "{args:?} succeeded");
        ensure!(
            err.trim_end().lines().count() == 1 && err.contains(needle),
            "{args:?}: {err}"
        );
        ensure!(!output.exists(), "{args:?} left {o}");
        ensure!(
            std::fs::read_dir(dir.path())?.count() == 1,
            "{args:?} left a temporary file"
        );
    }
    let run = profk(&[
        "select",
        "--input",
        missing.to_str().unwrap(),
        "--tensor",
        "x",
        "--k",
        "1",
        "--output",
        o,
    ])?;
    ensure!(!run.status.success() && !output.exists());
    // With nan = largest the same input works, NaN first.
    profk_ok(&[
        "select", "--input", i, "--tensor", "x", "--k", "2", "--nan", "largest", "--output", o,
    ])?;
    let out = candle_core::safetensors::load(&output, &Device::Cpu)?;
    ensure!(out["indices"].to_vec1::<i64>()? == vec![1, 2]);
    Ok(())
}

#[test]
fn bench_prints_a_table() -> Result<()> {
    let run = profk_ok(&[
        "bench", "--device", "cpu", "--n", "100000", "--k", "10", "--reps", "1",
    ])?;
    let out = String::from_utf8_lossy(&run.stdout);
    ensure!(
        out.contains("| N | k | profk ms") && out.lines().any(|l| l.starts_with("| 2^16.6 | 10 |")),
        "{out}"
    );
    Ok(())
}

#[test]
fn output_that_is_the_input_or_not_a_regular_file_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("s.st");
    let x = Tensor::new(&[3f32, 1.0, 2.0], &Device::Cpu)?;
    save(
        &input,
        &[
            ("x", x),
            ("other", Tensor::ones(2, DType::F32, &Device::Cpu)?),
        ],
    )?;
    let before = std::fs::read(&input)?;
    let i = input.to_str().unwrap();
    let hard = dir.path().join("hard.st");
    std::fs::hard_link(&input, &hard)?;
    let link = dir.path().join("link.st");
    std::os::unix::fs::symlink(&input, &link)?;
    let dotted = format!("{}/./s.st", dir.path().display());
    let cases = [
        (i.to_string(), "also an input"),
        (dotted, "also an input"),
        (hard.display().to_string(), "also an input"),
        (link.display().to_string(), "also an input"),
        ("/dev/null".to_string(), "device node"),
        (dir.path().display().to_string(), "directory"),
    ];
    for (out, needle) in &cases {
        let run = profk(&[
            "select", "--input", i, "--tensor", "x", "--k", "1", "--output", out,
        ])?;
        let err = String::from_utf8_lossy(&run.stderr);
        ensure!(!run.status.success(), "--output {out} succeeded");
        ensure!(
            err.contains(needle) && err.contains(out.as_str()),
            "--output {out}: {err}"
        );
        ensure!(
            std::fs::read(&input)? == before,
            "--output {out} changed the input"
        );
    }
    // A symlink to another regular file is followed: the link stays, its target gets the result.
    let target = dir.path().join("target.st");
    std::fs::write(&target, b"old")?;
    let to_target = dir.path().join("to_target.st");
    std::os::unix::fs::symlink(&target, &to_target)?;
    profk_ok(&[
        "select",
        "--input",
        i,
        "--tensor",
        "x",
        "--k",
        "1",
        "--output",
        to_target.to_str().unwrap(),
    ])?;
    ensure!(std::fs::symlink_metadata(&to_target)?
        .file_type()
        .is_symlink());
    let out = candle_core::safetensors::load(&target, &Device::Cpu)?;
    ensure!(out["values"].to_vec1::<f32>()? == [3.0]);
    Ok(())
}

#[test]
fn params_device_shows_the_plan_of_that_path() -> Result<()> {
    let run = profk_ok(&[
        "params", "--n", "2^16", "--k", "512", "--device", "cuda", "--rows", "1024", "--json",
    ])?;
    let shown: serde_json::Value = serde_json::from_slice(&run.stdout)?;
    let plan = profk::gpu_params_for(1 << 16, 512, 1e-3 / 1024.0, 1024)?
        .ok_or_else(|| anyhow::anyhow!("the CUDA path does not sample here"))?;
    ensure!(shown["plan"] == serde_json::to_value(plan)?, "{shown}");
    ensure!(
        shown["plan"]["p_recall_fail"].as_f64() > Some(0.0),
        "{shown}"
    );
    // The masked block-selection rows go by the histogram selection on CUDA: no sample to show.
    let masked = profk_ok(&[
        "params", "--n", "32768", "--k", "64", "--device", "cuda", "--rows", "8192", "--json",
    ])?;
    let shown: serde_json::Value = serde_json::from_slice(&masked.stdout)?;
    ensure!(
        shown["plan"].is_null() && shown["histogram"] == "one block per row",
        "{shown}"
    );
    let short = profk(&["params", "--n", "4096", "--k", "8", "--device", "cpu"])?;
    ensure!(
        String::from_utf8_lossy(&short.stdout).contains("exact selection without sampling"),
        "{}",
        String::from_utf8_lossy(&short.stdout)
    );
    Ok(())
}

#[test]
fn epsilon_counts_first_attempts_on_the_cpu() -> Result<()> {
    let run = profk_ok(&[
        "epsilon",
        "--device",
        "cpu",
        "--n",
        "2^14",
        "--k",
        "512",
        "--rows",
        "50",
        "--attempts",
        "100",
        "--sample",
        "512",
        "--eps",
        "0.3",
        "--inputs",
        "normal,infinities",
        "--json",
    ])?;
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<std::result::Result<_, _>>()?;
    ensure!(lines.len() == 2, "{lines:?}");
    ensure!(lines[1]["input"] == "infinities" && lines[1]["attempts"] == 100);
    // Without --device, a build runs the path it has: the CPU one unless built with CUDA.
    let default = profk_ok(&[
        "epsilon",
        "--n",
        "2^14",
        "--k",
        "512",
        "--rows",
        "2",
        "--attempts",
        "2",
        "--sample",
        "512",
        "--eps",
        "0.3",
        "--inputs",
        "normal",
        "--json",
    ])?;
    let trial: serde_json::Value = serde_json::from_slice(&default.stdout)?;
    let want = if cfg!(feature = "cuda") {
        "cuda"
    } else {
        "cpu"
    };
    ensure!(trial["device"] == want, "{trial}");
    let bad = profk(&["epsilon", "--device", "cpu", "--inputs", "nope"])?;
    ensure!(!bad.status.success());
    ensure!(String::from_utf8_lossy(&bad.stderr).contains("--inputs nope"));
    Ok(())
}

/// `profk params`: its JSON object, its table and its errors.
mod params_cli {
    use profk::params::{self, Method};

    fn run_cli(args: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_profk"))
            .arg("params")
            .args(args)
            .output()
            .expect("running profk")
    }

    #[test]
    fn cli_json_is_one_object_with_the_documented_keys() {
        for (flags, method) in [
            (&[][..], Method::Exact),
            (&["--exact"][..], Method::Exact),
            (&["--fast"][..], Method::Fast),
        ] {
            let mut args = vec!["--n", "2^24", "--k", "1000", "--eps", "1e-4", "--json"];
            args.extend_from_slice(flags);
            let out = run_cli(&args);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8(out.stdout).unwrap();
            assert_eq!(stdout.trim().lines().count(), 1, "{stdout}");
            let value: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
            let object = value.as_object().unwrap();
            let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(
                keys,
                [
                    "capacity",
                    "eps",
                    "k",
                    "n",
                    "p_overflow",
                    "p_recall_fail",
                    "sample",
                    "t"
                ]
            );
            let expected = match method {
                Method::Exact => params::exact(1 << 24, 1000, 1e-4, None).unwrap(),
                Method::Fast => params::fast(1 << 24, 1000, 1e-4, None).unwrap(),
            };
            assert_eq!(value, serde_json::to_value(expected).unwrap());
        }
    }

    #[test]
    fn cli_table_and_sample_override() {
        let out = run_cli(&["--n", "1000000", "--k", "100", "--sample", "5000"]);
        assert!(out.status.success());
        let stdout = String::from_utf8(out.stdout).unwrap();
        let expected = params::exact(1_000_000, 100, 1e-3, Some(5000)).unwrap();
        for needle in [
            format!("sample S       {}", expected.sample),
            format!("threshold t    {}", expected.t),
            format!("capacity M     {}", expected.capacity),
            "Pr(R < k)".to_string(),
            "Pr(R > M)".to_string(),
        ] {
            assert!(
                stdout.contains(&needle),
                "{needle:?} missing from\n{stdout}"
            );
        }
    }

    #[test]
    fn cli_errors_are_one_line_with_nonzero_exit() {
        for args in [
            &["--n", "10", "--k", "11"][..],
            &["--n", "10", "--k", "3", "--eps", "2"][..],
            &["--n", "10", "--k", "3", "--exact", "--fast"][..],
            &["--n", "2^70", "--k", "3"][..],
        ] {
            let out = run_cli(args);
            assert!(!out.status.success(), "{args:?}");
            assert!(out.stdout.is_empty(), "{args:?}");
            let stderr = String::from_utf8(out.stderr).unwrap();
            assert!(!stderr.trim().is_empty(), "{args:?}");
            if args.len() == 4 && args[3] == "11" {
                assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
                assert!(stderr.contains("k = 11"), "{stderr}");
            }
        }
    }
}
