//! The pair operations (sparse decode, gather-linear), the fused optimizer and a whole training step, on
//! every device against an f64 host reference and against the CPU path: random and adversarial pair
//! sets (ties, empty rows, a latent picked by every row, k = 1, k = n, no pairs).
//!
//! With `--features cuda` each test also runs on the GPU.
use crate::common;
use anyhow::Result;
use candle_core::{DType, Device, Tensor, Var};
use common::{host, max_err, uniform};
use rand::{Rng, SeedableRng};
use runtime::test_device;
use sae::config::DecodeMode;
use sae::sparse::{gather_linear, sparse_decode};

/// Named pair sets (ascending flat indices) over `b` rows of `n` latents. The empty set only on the
/// CPU: candle cannot allocate an empty CUDA tensor (cuMemAllocAsync rejects 0 bytes), and a selection
/// of B·k ≥ 1 pairs is never empty.
fn pair_sets(b: usize, n: usize, dev: &Device) -> Vec<(&'static str, Vec<i64>)> {
    let flat = |r: usize, c: usize| (r * n + c) as i64;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(99);
    let mut random: Vec<i64> = (0..b * n)
        .filter(|_| rng.random::<f32>() < 0.2)
        .map(|i| i as i64)
        .collect();
    random.sort();
    let every_row_one_latent: Vec<i64> = (0..b).map(|r| flat(r, 3)).collect();
    let empty_rows: Vec<i64> = (0..b)
        .filter(|r| r % 3 == 1)
        .flat_map(|r| [flat(r, 0), flat(r, n - 1)])
        .collect();
    let mut sets = vec![
        ("random", random),
        ("latent 3 in every row", every_row_one_latent),
        ("empty rows", empty_rows),
        ("k = 1", vec![flat(b / 2, n / 2)]),
        ("k = n", (0..(b * n) as i64).collect()),
    ];
    if dev.is_cpu() {
        sets.push(("no pairs", vec![]));
    }
    sets
}

fn idx_tensor(idx: &[i64], dev: &Device) -> Result<Tensor> {
    Ok(Tensor::from_vec(idx.to_vec(), idx.len(), dev)?)
}

/// f64 reference of the decode and its gradients under the loss Σ out ⊙ probe.
fn decode_reference(
    vals: &[f64],
    idx: &[i64],
    w: &[f64],
    probe: &[f64],
    (b, n, d): (usize, usize, usize),
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; b * d];
    let mut dv = vec![0.0; idx.len()];
    let mut dw = vec![0.0; n * d];
    for (s, &i) in idx.iter().enumerate() {
        let (r, j) = (i as usize / n, i as usize % n);
        for c in 0..d {
            out[r * d + c] += vals[s] * w[j * d + c];
            dv[s] += probe[r * d + c] * w[j * d + c];
            dw[j * d + c] += vals[s] * probe[r * d + c];
        }
    }
    (out, dv, dw)
}

fn decode_matches_reference(dev: &Device) -> Result<()> {
    let (b, n, d) = (9, 11, 37);
    for (name, idx) in pair_sets(b, n, dev) {
        let s = idx.len();
        // Ties: values drawn from three levels.
        let vals: Vec<f32> = (0..s).map(|i| [0.5f32, -1.25, 2.0][i % 3]).collect();
        let vals = Var::from_tensor(&Tensor::from_vec(vals, s, dev)?)?;
        let w = Var::from_tensor(&uniform(n * d, 1, dev)?.reshape((n, d))?)?;
        let probe = uniform(b * d, 2, dev)?.reshape((b, d))?;
        let idx_t = idx_tensor(&idx, dev)?;
        let out = sparse_decode(vals.as_tensor(), &idx_t, w.as_tensor(), b)?;
        let grads = (&out * &probe)?.sum_all()?.backward()?;
        let (r_out, r_dv, r_dw) = decode_reference(
            &host(vals.as_tensor())?,
            &idx,
            &host(w.as_tensor())?,
            &host(&probe)?,
            (b, n, d),
        );
        assert!(max_err(&host(&out)?, &r_out) < 1e-4, "{name}: forward");
        let dw = grads.get(w.as_tensor()).expect("dW");
        assert!(max_err(&host(dw)?, &r_dw) < 1e-4, "{name}: dW");
        if s > 0 {
            let dv = grads.get(vals.as_tensor()).expect("d vals");
            assert!(max_err(&host(dv)?, &r_dv) < 1e-4, "{name}: d vals");
        }
    }
    Ok(())
}
test_device!(decode_matches_reference_on, decode_matches_reference);

fn gather_linear_matches_reference(dev: &Device) -> Result<()> {
    let (b, n, d) = (8, 13, 41);
    for (name, idx) in pair_sets(b, n, dev) {
        let s = idx.len();
        let xc = Var::from_tensor(&uniform(b * d, 3, dev)?.reshape((b, d))?)?;
        let w = Var::from_tensor(&uniform(n * d, 4, dev)?.reshape((n, d))?)?;
        let bias = Var::from_tensor(&uniform(n, 5, dev)?)?;
        let probe = uniform(s.max(1), 6, dev)?.narrow(0, 0, s)?;
        let idx_t = idx_tensor(&idx, dev)?;
        let out = gather_linear(xc.as_tensor(), w.as_tensor(), bias.as_tensor(), &idx_t)?;
        let grads = (&out * &probe)?.sum_all()?.backward()?;
        let (x_h, w_h, b_h, p_h) = (
            host(xc.as_tensor())?,
            host(w.as_tensor())?,
            host(bias.as_tensor())?,
            host(&probe)?,
        );
        let mut r_out = vec![0.0; s];
        let mut r_dx = vec![0.0; b * d];
        let mut r_dw = vec![0.0; n * d];
        let mut r_db = vec![0.0; n];
        for (k, &i) in idx.iter().enumerate() {
            let (r, j) = (i as usize / n, i as usize % n);
            r_out[k] = b_h[j];
            r_db[j] += p_h[k];
            for c in 0..d {
                r_out[k] += x_h[r * d + c] * w_h[j * d + c];
                r_dx[r * d + c] += p_h[k] * w_h[j * d + c];
                r_dw[j * d + c] += p_h[k] * x_h[r * d + c];
            }
        }
        assert!(max_err(&host(&out)?, &r_out) < 1e-4, "{name}: forward");
        if s == 0 {
            continue;
        }
        let get = |v: &Var| host(grads.get(v.as_tensor()).expect("gradient"));
        assert!(max_err(&get(&xc)?, &r_dx) < 1e-4, "{name}: d xc");
        assert!(max_err(&get(&w)?, &r_dw) < 1e-4, "{name}: dW");
        assert!(max_err(&get(&bias)?, &r_db) < 1e-4, "{name}: db");
    }
    Ok(())
}
test_device!(
    gather_linear_matches_reference_on,
    gather_linear_matches_reference
);

/// Large enough that a latent gathers many pairs, so that the order of the per-latent sums matters:
/// two runs must agree bit for bit, and the device must agree with the CPU to rounding.
fn pair_ops_are_deterministic_and_match_cpu(dev: &Device) -> Result<()> {
    let (b, n, d) = (512, 64, 96);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let idx: Vec<i64> = (0..(b * n) as i64)
        .filter(|i| i % n as i64 == 5 || rng.random::<f32>() < 0.1)
        .collect();
    let s = idx.len();
    let run = |dev: &Device| -> Result<Vec<Vec<f64>>> {
        let xc = Var::from_tensor(&uniform(b * d, 8, dev)?.reshape((b, d))?)?;
        let w = Var::from_tensor(&uniform(n * d, 9, dev)?.reshape((n, d))?)?;
        let bias = Var::from_tensor(&uniform(n, 10, dev)?)?;
        let idx_t = idx_tensor(&idx, dev)?;
        let vals = gather_linear(xc.as_tensor(), w.as_tensor(), bias.as_tensor(), &idx_t)?;
        let out = sparse_decode(&vals, &idx_t, w.as_tensor(), b)?;
        let grads = out.sqr()?.sum_all()?.backward()?;
        let mut v = vec![host(&vals)?, host(&out)?];
        for var in [&xc, &w, &bias] {
            v.push(host(grads.get(var.as_tensor()).expect("gradient"))?);
        }
        Ok(v)
    };
    let (a, again, cpu) = (run(dev)?, run(dev)?, run(&Device::Cpu)?);
    assert_eq!(a, again, "two runs differ");
    for (i, (x, y)) in a.iter().zip(&cpu).enumerate() {
        let scale = y.iter().fold(1f64, |m, v| m.max(v.abs()));
        assert!(
            max_err(x, y) < 1e-5 * scale,
            "output {i} differs from the CPU ({s} pairs)"
        );
    }
    Ok(())
}
test_device!(
    pair_ops_deterministic_on,
    pair_ops_are_deterministic_and_match_cpu
);

fn fired_latents_marks_positive_pairs(dev: &Device) -> Result<()> {
    let n = 6;
    let idx = idx_tensor(&[1, 4, 7, 10, 14], dev)?;
    let vals = Tensor::new(&[0.5f32, 0.0, 2.0, -1.0, 0.25], dev)?;
    let fired = sae::sparse::fired_latents(&idx, &vals, n)?;
    assert_eq!(fired.to_vec1::<f32>()?, vec![0.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
    Ok(())
}
test_device!(fired_latents_on, fired_latents_marks_positive_pairs);

/// A few training steps with every latent dead (aux-k on), on the device and on the CPU: the same
/// loss, gradient norm and weights (the device path runs the fused optimizer).
fn training_steps_match_cpu(dev: &Device) -> Result<()> {
    let text = common::synthetic_config("batchtopk", "", 1)
        .replace("dead_tokens = 512", "dead_tokens = 0");
    let cfg = sae::Config::from_toml(&text)?;
    let raw = uniform(64 * 16, 21, &Device::Cpu)?.reshape((64, 1, 16))?;
    let mut on_dev = sae::Trainer::new(cfg.clone(), &raw, dev)?;
    let mut on_cpu = sae::Trainer::new(cfg, &raw, &Device::Cpu)?;
    for step in 0..4 {
        let a = on_dev.train_step(&raw, true)?;
        let b = on_cpu.train_step(&raw, true)?;
        assert!(a.aux_loss > 0.0, "aux-k loss did not run");
        assert!(
            (a.loss - b.loss).abs() < 1e-4 * b.loss.max(1.0),
            "step {step}: loss {} vs {}",
            a.loss,
            b.loss
        );
        assert!(
            (a.grad_norm - b.grad_norm).abs() < 1e-4 * b.grad_norm.max(1.0),
            "step {step}: grad norm"
        );
    }
    for (x, y) in on_dev.sae.vars().iter().zip(on_cpu.sae.vars()) {
        let (x, y) = (host(x.as_tensor())?, host(y.as_tensor())?);
        assert!(max_err(&x, &y) < 1e-4, "weights differ after 4 steps");
    }
    Ok(())
}
test_device!(training_steps_match_cpu_on, training_steps_match_cpu);

/// Random [W_enc [d, n], b_enc, W_dec, b_dec] in SAELens' layout, from seeds `seed..seed + 4`.
fn saelens_params(d: usize, n: usize, seed: u64, dev: &Device) -> Result<[Tensor; 4]> {
    Ok([
        uniform(d * n, seed, dev)?.reshape((d, n))?,
        (uniform(n, seed + 1, dev)? * 0.1)?,
        uniform(n * d, seed + 2, dev)?.reshape((n, d))?,
        (uniform(d, seed + 3, dev)? * 0.1)?,
    ])
}

/// The weight sinks (used in training) receive the same gradients as candle's autograd, with the
/// aux-k loss adding a second contribution to both weight matrices: pair reductions in the sparse
/// form, row blocks of the dead latents (arriving before the main reduction) in the dense one.
fn sinks_equal_autograd(dev: &Device) -> Result<()> {
    let (b, d, n, k) = (16, 12, 40, 3);
    let shape = common::batchtopk_shape(d, n, k);
    let x = uniform(b * d, 41, dev)?.reshape((b, d))?;
    let dead = Tensor::from_vec(
        (0..n).map(|j| (j % 3 == 0) as u8).collect::<Vec<u8>>(),
        n,
        dev,
    )?;
    let grads = |with_sinks: bool, form: sae::config::AuxDecode| -> Result<Vec<Vec<f64>>> {
        let params = saelens_params(d, n, 42, dev)?;
        let mut sae = sae::Sae::from_tensors(shape.clone(), params.each_ref(), DecodeMode::Sparse)?;
        if with_sinks {
            sae.sinks = Some(Default::default());
        }
        let (fwd, aux) = common::forward_and_aux(&sae, &x, None, (&dead, n.div_ceil(3)), 4, form)?;
        let g = (fwd.loss + aux)?.backward()?;
        sae::optim::collect_grads(&sae, &g)?
            .iter()
            .map(host)
            .collect()
    };
    let without = grads(false, sae::config::AuxDecode::Sparse)?;
    for form in [
        sae::config::AuxDecode::Sparse,
        sae::config::AuxDecode::Dense,
    ] {
        let with = grads(true, form)?;
        for (i, (a, b)) in with.iter().zip(&without).enumerate() {
            assert!(
                max_err(a, b) < 1e-4,
                "{form:?}: parameter {i}: sink and autograd gradients differ"
            );
        }
    }
    Ok(())
}
test_device!(sinks_equal_autograd_on, sinks_equal_autograd);

/// f64 reference of the aux-k loss and its gradients (W_enc as [n, d] rows, b_enc, W_dec, b_dec) with a
/// fixed reconstruction `recon`: each row keeps the `keep` largest ReLU pre-activations among the dead
/// latents.
#[allow(clippy::too_many_arguments)]
fn aux_reference(
    x: &[f64],
    recon: &[f64],
    (w_enc, b_enc, w_dec, b_dec): (&[f64], &[f64], &[f64], &[f64]),
    dead: &[u8],
    keep: usize,
    (b, n, d): (usize, usize, usize),
) -> (f64, [Vec<f64>; 4]) {
    let xc: Vec<f64> = (0..b * d).map(|i| x[i] - b_dec[i % d]).collect();
    let mut acts = vec![0.0; b * n];
    for r in 0..b {
        let pre = |j: usize| {
            let dot: f64 = (0..d).map(|c| xc[r * d + c] * w_enc[j * d + c]).sum();
            (dot + b_enc[j]).max(0.0)
        };
        let mut cand: Vec<(f64, usize)> = (0..n)
            .filter(|&j| dead[j] != 0)
            .map(|j| (pre(j), j))
            .collect();
        cand.sort_by(|a, b| b.0.total_cmp(&a.0));
        for &(v, j) in cand.iter().take(keep) {
            acts[r * n + j] = v;
        }
    }
    let e: Vec<f64> = (0..b * d).map(|i| x[i] - recon[i]).collect();
    let mean: Vec<f64> = (0..d)
        .map(|c| (0..b).map(|r| e[r * d + c]).sum::<f64>() / b as f64)
        .collect();
    let denom = (0..b * d)
        .map(|i| (e[i] - mean[i % d]).powi(2))
        .sum::<f64>()
        / b as f64;
    let mut loss = 0.0;
    let mut g = vec![0.0; b * d];
    for r in 0..b {
        for c in 0..d {
            let rec: f64 = (0..n).map(|j| acts[r * n + j] * w_dec[j * d + c]).sum();
            let diff = e[r * d + c] - rec;
            loss += diff * diff / (b as f64 * denom);
            g[r * d + c] = -2.0 * diff / (b as f64 * denom);
        }
    }
    let (mut dwe, mut dbe, mut dwd, mut dbd) = (
        vec![0.0; n * d],
        vec![0.0; n],
        vec![0.0; n * d],
        vec![0.0; d],
    );
    for r in 0..b {
        for j in 0..n {
            let a = acts[r * n + j];
            let da = if a > 0.0 {
                (0..d).map(|c| g[r * d + c] * w_dec[j * d + c]).sum()
            } else {
                0.0
            };
            dbe[j] += da;
            for c in 0..d {
                dwd[j * d + c] += a * g[r * d + c];
                dwe[j * d + c] += da * xc[r * d + c];
                dbd[c] -= da * w_enc[j * d + c];
            }
        }
    }
    (loss, [dwe, dbe, dwd, dbd])
}

/// The aux-k loss's coefficient in the reference comparison.
const AUX_COEF: f64 = 0.375;

/// Both forms of the aux-k loss (the selected pairs, the dense matmuls over the dead columns) against
/// the f64 reference and against each other: loss and the gradients of every parameter, for every
/// latent dead, a third of them, and fewer than k_aux.
fn aux_forms_match_reference(dev: &Device) -> Result<()> {
    let (b, d, n, k, k_aux) = (16, 12, 40, 3, 4);
    let shape = common::batchtopk_shape(d, n, k);
    let x = uniform(b * d, 51, dev)?.reshape((b, d))?;
    let recon = (uniform(b * d, 52, dev)?.reshape((b, d))? * 0.5)?;
    let params = saelens_params(d, n, 53, dev)?;
    let patterns: [(&str, Vec<u8>); 3] = [
        ("all dead", vec![1; n]),
        ("a third dead", (0..n).map(|j| (j % 3 == 0) as u8).collect()),
        (
            "fewer dead than k_aux",
            (0..n).map(|j| (j == 7 || j == 30) as u8).collect(),
        ),
    ];
    for (name, dead) in patterns {
        let n_dead = dead.iter().filter(|&&v| v != 0).count();
        let mask = Tensor::from_vec(dead.clone(), n, dev)?;
        let mut results = Vec::new();
        for form in [
            sae::config::AuxDecode::Sparse,
            sae::config::AuxDecode::Dense,
        ] {
            let mut model =
                sae::Sae::from_tensors(shape.clone(), params.each_ref(), DecodeMode::Sparse)?;
            model.sinks = Some(Default::default());
            let (_, aux) =
                common::forward_and_aux(&model, &x, Some(&recon), (&mask, n_dead), k_aux, form)?;
            // A coefficient other than 1, as in training: the backward must scale by its upstream gradient.
            let g = (&aux * AUX_COEF)?.backward()?;
            let grads: Vec<Vec<f64>> = sae::optim::collect_grads(&model, &g)?
                .iter()
                .map(host)
                .collect::<Result<_>>()?;
            results.push((aux.to_scalar::<f32>()? as f64, grads, model));
        }
        let model = &results[0].2;
        let (w_enc, b_enc, w_dec, b_dec) = (
            host(model.w_enc.as_tensor())?,
            host(model.b_enc.as_tensor())?,
            host(model.w_dec.as_tensor())?,
            host(model.b_dec.as_tensor())?,
        );
        let (r_loss, r_grads) = aux_reference(
            &host(&x)?,
            &host(&recon)?,
            (&w_enc, &b_enc, &w_dec, &b_dec),
            &dead,
            k_aux,
            (b, n, d),
        );
        for (form, (loss, grads, _)) in ["sparse", "dense"].iter().zip(&results) {
            assert!(
                (loss - r_loss).abs() < 1e-4 * r_loss.max(1.0),
                "{name}, {form}: loss {loss} vs {r_loss}"
            );
            for (i, (got, want)) in grads.iter().zip(&r_grads).enumerate() {
                let want: Vec<f64> = want.iter().map(|v| v * AUX_COEF).collect();
                let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
                assert!(
                    max_err(got, &want) < 1e-4 * scale,
                    "{name}, {form}: gradient of parameter {i} differs from the reference"
                );
            }
        }
    }
    Ok(())
}
test_device!(aux_forms_match_reference_on, aux_forms_match_reference);

/// f64 reference of the aux activations: each row of `scores [b, n]` at `cols` (the first `n_dead`
/// read, the padding 0), its `keep` largest kept by a full sort (value descending, index ascending).
fn aux_acts_reference(
    scores: &[f64],
    n: usize,
    cols: &[u32],
    n_dead: usize,
    keep: usize,
) -> Vec<f64> {
    let rows = scores.len() / n;
    let mut out = vec![0.0; rows * cols.len()];
    for b in 0..rows {
        let vals: Vec<f64> = (0..cols.len())
            .map(|j| {
                if j < n_dead {
                    scores[b * n + cols[j] as usize]
                } else {
                    0.0
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..vals.len()).collect();
        order.sort_by(|&i, &j| vals[j].partial_cmp(&vals[i]).unwrap().then(i.cmp(&j)));
        for &j in order.iter().take(keep) {
            out[b * cols.len() + j] = vals[j];
        }
    }
    out
}

/// The aux activations over the dead columns, by both selection routes (the fused kernel, profk and a
/// scatter), against the f64 full sort: distinct and tied scores (ties across the kernel's 256-column
/// chunks and at the threshold), ±0, negative scores, all-equal rows, |D| < k_aux, |D| = 1, every
/// column, rows wider than the kernel's shared memory, keep ∈ {1, |D| − 1}; f32 and bf16.
fn aux_acts_match_sort(dev: &Device) -> Result<()> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(61);
    let every = |n: usize, step: usize| (0..n).filter(|j| j % step == 0).collect::<Vec<_>>();
    type Case = (&'static str, usize, usize, Option<Vec<usize>>, usize, u8);
    // (name, rows, n, dead columns (None: all), k_aux, scores: 0 distinct ≥ 0, 1 few levels, 2 all equal,
    // 3 distinct of both signs, 4 three levels at fixed positions: a tenth 1, a fifth 0.5, the rest 0.25,
    // so that k_aux can take every tie of the threshold or all but one). The training step's scores are ReLU outputs, never below the padding's
    // zeros: negative ones only where there is no padding (|D| a multiple of 16, or every column).
    let cases: Vec<Case> = vec![
        ("distinct, a third dead", 5, 300, Some(every(300, 3)), 30, 0),
        ("distinct, keep 1", 4, 300, Some(every(300, 3)), 1, 0),
        ("distinct, keep |D| - 1", 4, 300, Some(every(300, 3)), 99, 0),
        ("ties across chunks", 6, 1400, Some(every(1400, 2)), 100, 1),
        ("ties, keep 1", 3, 1400, Some(every(1400, 2)), 1, 1),
        ("ties, keep |D| - 1", 3, 1400, Some(every(1400, 2)), 699, 1),
        ("all equal", 3, 500, Some(every(500, 5)), 10, 2),
        (
            "fewer dead than k_aux",
            4,
            200,
            Some(vec![3, 77, 150]),
            10,
            0,
        ),
        ("one dead", 4, 200, Some(vec![42]), 10, 1),
        ("every column", 5, 40, None, 4, 1),
        (
            "negative scores, no padding",
            4,
            320,
            Some(every(320, 2)),
            40,
            3,
        ),
        ("negative scores, every column", 4, 300, None, 40, 3),
        ("wider than shared memory", 2, 12000, None, 800, 1),
        ("every tie of the threshold kept", 3, 400, None, 120, 4),
        ("all ties but one kept", 3, 400, None, 119, 4),
        ("the top level exactly", 3, 400, None, 40, 4),
    ];
    for (name, rows, n, dead, k_aux, kind) in cases {
        let levels = [0.0f32, -0.0, 0.25, 0.5, 1.0];
        let host_scores: Vec<f32> = (0..rows * n)
            .map(|i| match kind {
                0 => rng.random::<f32>(),
                1 => levels[rng.random_range(0..levels.len())],
                2 => 0.5,
                3 => rng.random::<f32>() * 2.0 - 1.0,
                _ => match i % n % 10 {
                    0 => 1.0,
                    1 | 2 => 0.5,
                    _ => 0.25,
                },
            })
            .collect();
        let n_dead = dead.as_ref().map_or(n, Vec::len);
        let keep = k_aux.min(n_dead);
        // The dead columns padded to a multiple of 16 with the first, as the training step pads them.
        let cols: Option<Vec<u32>> = dead.map(|d| {
            let mut c: Vec<u32> = d.iter().map(|&j| j as u32).collect();
            c.resize(c.len().next_multiple_of(16), c[0]);
            c
        });
        let all: Vec<u32> = (0..n as u32).collect();
        let ref_cols = cols.as_deref().unwrap_or(&all);
        for dtype in [DType::F32, DType::BF16] {
            let scores = Tensor::from_vec(host_scores.clone(), (rows, n), dev)?.to_dtype(dtype)?;
            let want = aux_acts_reference(&host(&scores)?, n, ref_cols, n_dead, keep);
            let cols_t = cols
                .as_ref()
                .map(|c| Tensor::from_vec(c.clone(), c.len(), dev))
                .transpose()?;
            for how in [
                sae::aux_dense::AuxSelect::Fused,
                sae::aux_dense::AuxSelect::Profk,
            ] {
                let got = sae::aux_dense::dead_column_acts(
                    &scores,
                    cols_t.as_ref(),
                    n_dead,
                    keep,
                    how,
                    (profk::Selector::Profk, 7),
                )?;
                assert_eq!(got.dims2()?, (rows, ref_cols.len()), "{name}");
                assert_eq!(got.dtype(), dtype, "{name}");
                let got = host(&got)?;
                let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
                assert_eq!(
                    wrong, 0,
                    "{name}, {dtype:?}, {how:?}: {wrong} activations differ"
                );
            }
        }
    }
    Ok(())
}
test_device!(aux_acts_match_sort_on, aux_acts_match_sort);

/// The dead columns of a mask (compacted on the device on CUDA) against a host scan: ascending, padded
/// to a multiple of 16 with the first; masks shorter and longer than the kernel's thread count, dead
/// latents at both ends, a count already aligned, every latent dead.
fn dead_columns_match_host(dev: &Device) -> Result<()> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(81);
    let masks: Vec<(&str, Vec<u8>)> = vec![
        (
            "a third of 40",
            (0..40).map(|j| (j % 3 == 0) as u8).collect(),
        ),
        (
            "one of 10, the last",
            (0..10).map(|j| (j == 9) as u8).collect(),
        ),
        (
            "one of 5000, the first",
            (0..5000).map(|j| (j == 0) as u8).collect(),
        ),
        (
            "the first 32 of 3000",
            (0..3000).map(|j| (j < 32) as u8).collect(),
        ),
        ("every one of 2000", vec![1; 2000]),
        (
            "two of 40000, the first in the kernel's third tile",
            (0..40000)
                .map(|j| (j == 35001 || j == 39999) as u8)
                .collect(),
        ),
        (
            "5 % of 2^17 + 5",
            (0..(1 << 17) + 5)
                .map(|_| (rng.random::<f32>() < 0.05) as u8)
                .collect(),
        ),
        (
            "nonzero bytes other than 1",
            (0..777).map(|j| if j % 5 == 1 { 7 } else { 0 }).collect(),
        ),
    ];
    for (name, mask) in masks {
        let mut want: Vec<u32> = (0..mask.len() as u32)
            .filter(|&j| mask[j as usize] != 0)
            .collect();
        let n_dead = want.len();
        want.resize(n_dead.next_multiple_of(16), want[0]);
        let t = Tensor::from_vec(mask.clone(), mask.len(), dev)?;
        let got: Vec<u32> = sae::aux_dense::dead_columns(&t, n_dead)?.to_vec1()?;
        assert_eq!(got, want, "{name}");
    }
    Ok(())
}
test_device!(dead_columns_match_host_on, dead_columns_match_host);

/// f32 → bf16 → f32, rounding to nearest even (finite values).
fn bf16_round(x: f64) -> f64 {
    let b = (x as f32).to_bits();
    f32::from_bits(b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000) as f64
}

/// The optimizer step in f64 over host copies of [W_enc, b_enc, W_dec, b_dec] (W_dec [n, d] at 2):
/// projection of the decoder gradient off its rows, global-norm clipping, Adam (moments rounded to
/// bf16 after the update with `bf16`), renormalization of the decoder rows. Returns the norm.
#[allow(clippy::too_many_arguments)]
fn adam_reference(
    p: &mut [Vec<f64>],
    g: &[Vec<f64>],
    (m, v): (&mut [Vec<f64>], &mut [Vec<f64>]),
    d: usize,
    (t, lr, clip): (u64, f64, f64),
    (beta1, beta2, eps): (f64, f64, f64),
    bf16: bool,
) -> f64 {
    let mut g = g.to_vec();
    for (gr, wr) in g[2].chunks_mut(d).zip(p[2].chunks(d)) {
        let dot: f64 = gr.iter().zip(wr).map(|(a, b)| a * b).sum();
        for (a, b) in gr.iter_mut().zip(wr) {
            *a -= dot * b;
        }
    }
    let norm = g.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
    let scale = if clip > 0.0 && norm > clip {
        clip / norm
    } else {
        1.0
    };
    let (bc1, bc2) = (1.0 - beta1.powi(t as i32), 1.0 - beta2.powi(t as i32));
    let round = |x: f64| if bf16 { bf16_round(x) } else { x };
    for i in 0..p.len() {
        for j in 0..p[i].len() {
            let gj = g[i][j] * scale;
            let mj = m[i][j] * beta1 + gj * (1.0 - beta1);
            let vj = v[i][j] * beta2 + gj * gj * (1.0 - beta2);
            p[i][j] -= lr * (mj / bc1) / ((vj / bc2).sqrt() + eps);
            (m[i][j], v[i][j]) = (round(mj), round(vj));
        }
    }
    for row in p[2].chunks_mut(d) {
        let n = row.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
        row.iter_mut().for_each(|x| *x /= n);
    }
    norm
}

/// Three optimizer steps (clipping active on the second) of `Adam::update` against the f64 reference,
/// with f32 and bf16 moments. The decoder's rows are wider than a block (300 > 256 threads) and W_enc
/// spans several of the fused kernel's chunks (4800 > 2048 elements).
fn fused_adam_matches_reference(dev: &Device) -> Result<()> {
    let (n, d) = (16, 300);
    for moments in ["f32", "bf16"] {
        let text = common::synthetic_config("batchtopk", "", 1)
            .replace("[train]", &format!("[train]\nmoments = \"{moments}\""));
        let cfg = sae::Config::from_toml(&text)?;
        let bf16 = moments == "bf16";
        let w_dec = uniform(n * d, 31, dev)?.reshape((n, d))?;
        let w_dec = w_dec.broadcast_div(&w_dec.sqr()?.sum_keepdim(1)?.sqrt()?)?;
        let params = [
            uniform(n * d, 32, dev)?.reshape((n, d))?,
            uniform(n, 33, dev)?,
            w_dec,
            uniform(d, 34, dev)?,
        ];
        let mut sae = sae::Sae::from_rows(
            common::batchtopk_shape(d, n, 4),
            params.each_ref(),
            DecodeMode::Sparse,
        )?;
        sae.sinks = None;
        let mut adam = sae::optim::Adam::new(&sae.vars(), &cfg.train)?;
        let want = if bf16 { DType::BF16 } else { DType::F32 };
        assert!(adam.m.iter().chain(&adam.v).all(|t| t.dtype() == want));
        let mut p: Vec<Vec<f64>> = params.iter().map(host).collect::<Result<_>>()?;
        let mut m: Vec<Vec<f64>> = p.iter().map(|x| vec![0.0; x.len()]).collect();
        let mut v = m.clone();
        let lr = 1e-3;
        for (step, clip) in [(1u64, 0.0), (2, 1.5), (3, 1e6)] {
            let grads: Vec<Tensor> = params
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let g = uniform(x.elem_count(), 100 * step + i as u64, dev)?;
                    Ok(g.reshape(x.shape())?)
                })
                .collect::<Result<_>>()?;
            let g_host: Vec<Vec<f64>> = grads.iter().map(host).collect::<Result<_>>()?;
            let norm = adam.update(&sae, grads, clip, lr)?;
            let want_norm = adam_reference(
                &mut p,
                &g_host,
                (&mut m, &mut v),
                d,
                (step, lr, clip),
                (adam.beta1, adam.beta2, adam.eps),
                bf16,
            );
            assert!(
                (norm - want_norm).abs() < 1e-5 * want_norm,
                "{moments} step {step}: norm {norm} vs {want_norm}"
            );
            for (i, var) in sae.vars().iter().enumerate() {
                let got = host(var.as_tensor())?;
                assert!(
                    max_err(&got, &p[i]) < 2e-5,
                    "{moments} step {step}: parameter {i} off by {}",
                    max_err(&got, &p[i])
                );
                // bf16 moments: each within an ulp (≤ 2^-7 relative) of the reference's rounding.
                for (got, want) in [(&adam.m[i], &m[i]), (&adam.v[i], &v[i])] {
                    let got = host(got)?;
                    let scale = want.iter().fold(1e-6f64, |a, x| a.max(x.abs()));
                    for (g, w) in got.iter().zip(want) {
                        let tol = if bf16 {
                            w.abs() / 128.0 + 1e-6 * scale
                        } else {
                            1e-5 * scale
                        };
                        assert!(
                            (g - w).abs() <= tol,
                            "{moments} step {step}: a moment of parameter {i}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
test_device!(
    fused_adam_matches_reference_on,
    fused_adam_matches_reference
);

/// The encoder's scores `relu(xc · W_encᵀ + b_enc)` against an f64 reference: on CUDA the TF32 matmul
/// with the bias + ReLU epilogue (`tf32_scores`), within TF32's rounding (2^-11 per factor), and the
/// f32 path; on the CPU the f32 path. Odd sizes: no dimension a multiple of 4.
fn scores_match_reference(dev: &Device) -> Result<()> {
    let (rows, n, d) = (37, 301, 75);
    let params = [
        uniform(n * d, 41, dev)?.reshape((n, d))?,
        uniform(n, 42, dev)?,
        uniform(n * d, 43, dev)?.reshape((n, d))?,
        uniform(d, 44, dev)?,
    ];
    let mut sae = sae::Sae::from_rows(
        common::batchtopk_shape(d, n, 4),
        params.each_ref(),
        DecodeMode::Sparse,
    )?;
    let xc = uniform(rows * d, 45, dev)?.reshape((rows, d))?;
    let (x, w, b) = (host(&xc)?, host(&params[0])?, host(&params[1])?);
    let modes: &[bool] = if dev.is_cuda() {
        &[false, true]
    } else {
        &[false]
    };
    for &tf32 in modes {
        sae.tf32_scores = tf32;
        let got = host(&sae.scores(&xc)?)?;
        assert_eq!(got.len(), rows * n);
        for r in 0..rows {
            for j in 0..n {
                let (xr, wj) = (&x[r * d..(r + 1) * d], &w[j * d..(j + 1) * d]);
                let dot: f64 = xr.iter().zip(wj).map(|(a, c)| a * c).sum();
                let mag: f64 = xr.iter().zip(wj).map(|(a, c)| (a * c).abs()).sum();
                let want = (dot + b[j]).max(0.0);
                let tol = if tf32 { 2e-3 * mag } else { 1e-5 * mag } + 1e-6;
                let g = got[r * n + j];
                assert!(
                    (g - want).abs() <= tol,
                    "tf32 {tf32}: score ({r}, {j}) {g} vs {want}"
                );
            }
        }
    }
    Ok(())
}
test_device!(scores_match_reference_on, scores_match_reference);
