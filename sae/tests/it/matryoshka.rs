//! Matryoshka's nested-prefix loss from the selected pairs, the crosscoder as a wide BatchTopK, and the
//! aux-k loss with most latents dead, each against a dense f64 reference of the loss and of every
//! gradient (dictionary_learning's formulas), on every device: CPU in CI, CUDA with `--features cuda`.
use crate::common;
use anyhow::Result;
use candle_core::{DType, Device, Tensor, Var};
use common::{host, max_err, uniform};
use rand::{Rng, SeedableRng};
use runtime::test_device;
use sae::arch::matryoshka::prefix_loss;
use sae::config::{Arch, AuxDecode, DecodeMode};
use sae::model::{Sae, Shape};

/// `got` within `tol` of `want`, relative to the larger of 1 and want's largest magnitude.
fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
    let err = max_err(got, want);
    assert!(err < tol * scale, "{what}: off by {err} (scale {scale})");
}

/// dictionary_learning's Matryoshka weights (`MatryoshkaBatchTopKTrainer.loss` with its default
/// `group_weights` 1/G: the mean over the G prefixes of (1/G)·(mean over tokens of ‖x − x̂_g‖²)), per
/// token and prefix: 1/(G²·B).
fn dl_coefs(groups: usize, batch: usize) -> Vec<f64> {
    vec![1.0 / ((groups * groups * batch) as f64); groups]
}

fn prefix_ends(groups: &[usize]) -> Vec<usize> {
    sae::arch::matryoshka::prefix_ends(groups)
}

/// Index of the group holding latent `j`.
fn group_of(ends: &[usize], j: usize) -> usize {
    ends.iter().position(|&e| j < e).expect("latent below n")
}

/// f64 reference of the prefix loss `Σ_g c_g Σ_b ‖x_b − b_dec − Σ_{pairs of b, j < ends[g]} a·W[j]‖²`
/// and its gradients wrt the values, W and b_dec; `recon` is the last prefix's reconstruction.
struct PrefixReference {
    loss: f64,
    recon: Vec<f64>,
    d_vals: Vec<f64>,
    d_w: Vec<f64>,
    d_b_dec: Vec<f64>,
}

#[allow(clippy::too_many_arguments)] // a plain host reference, free of the crate's types
fn prefix_reference(
    x: &[f64],
    vals: &[f64],
    idx: &[i64],
    w: &[f64],
    b_dec: &[f64],
    ends: &[usize],
    coefs: &[f64],
    (b, n, d): (usize, usize, usize),
) -> PrefixReference {
    let groups = ends.len();
    // Each group's decode, then the prefixes as cumulative sums.
    let mut part = vec![0.0; groups * b * d];
    for (s, &i) in idx.iter().enumerate() {
        let (r, j) = (i as usize / n, i as usize % n);
        let g = group_of(ends, j);
        for c in 0..d {
            part[(g * b + r) * d + c] += vals[s] * w[j * d + c];
        }
    }
    let mut err = vec![0.0; groups * b * d];
    let mut recon = vec![0.0; b * d];
    let mut loss = 0.0;
    for r in 0..b {
        for c in 0..d {
            let mut acc = b_dec[c];
            for g in 0..groups {
                acc += part[(g * b + r) * d + c];
                let e = x[r * d + c] - acc;
                err[(g * b + r) * d + c] = e;
                loss += coefs[g] * e * e;
            }
            recon[r * d + c] = acc;
        }
    }
    // U_h = Σ_{g ≥ h} −2·c_g·e_g.
    let mut u = vec![0.0; groups * b * d];
    for i in 0..b * d {
        let mut acc = 0.0;
        for g in (0..groups).rev() {
            acc += -2.0 * coefs[g] * err[g * b * d + i];
            u[g * b * d + i] = acc;
        }
    }
    let mut d_vals = vec![0.0; idx.len()];
    let mut d_w = vec![0.0; n * d];
    for (s, &i) in idx.iter().enumerate() {
        let (r, j) = (i as usize / n, i as usize % n);
        let g = group_of(ends, j);
        for c in 0..d {
            let up = u[(g * b + r) * d + c];
            d_vals[s] += up * w[j * d + c];
            d_w[j * d + c] += vals[s] * up;
        }
    }
    let d_b_dec = (0..d).map(|c| (0..b).map(|r| u[r * d + c]).sum()).collect();
    PrefixReference {
        loss,
        recon,
        d_vals,
        d_w,
        d_b_dec,
    }
}

/// Ascending pair sets over `b` rows of `n` latents, named, with the group layouts to try on them.
fn pair_sets(b: usize, n: usize, dev: &Device) -> Vec<(&'static str, Vec<i64>)> {
    let flat = |r: usize, c: usize| (r * n + c) as i64;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
    let random: Vec<i64> = (0..(b * n) as i64)
        .filter(|_| rng.random::<f32>() < 0.25)
        .collect();
    // No pair in latents 4..9 (the second group of the layout [4, 5, ...]).
    let gap: Vec<i64> = random
        .iter()
        .copied()
        .filter(|&i| !(4..9).contains(&(i as usize % n)))
        .collect();
    let mut sets = vec![
        ("random", random),
        ("no pair in latents 4..9", gap),
        (
            "rows without pairs",
            (0..b)
                .filter(|r| r % 3 == 0)
                .flat_map(|r| [flat(r, 1), flat(r, n - 1)])
                .collect(),
        ),
        ("one pair", vec![flat(b - 1, n / 2)]),
        ("every pair", (0..(b * n) as i64).collect()),
    ];
    // candle cannot allocate an empty CUDA tensor; a selection is never empty.
    if dev.is_cpu() {
        sets.push(("no pairs", vec![]));
    }
    sets
}

/// The prefix loss op (values, W_dec and b_dec as variables, through candle's autograd and through the
/// weight sink) against the f64 reference, for group layouts with one group (BatchTopK's loss), groups
/// of one latent, a group that no pair falls in, and arbitrary weights.
fn prefix_loss_matches_reference(dev: &Device) -> Result<()> {
    let (b, n, d) = (7, 23, 19);
    let layouts: Vec<(&str, Vec<usize>)> = vec![
        ("one group", vec![23]),
        ("four groups", vec![4, 5, 6, 8]),
        ("groups of one", vec![1, 1, 1, 20]),
        ("last group of one", vec![22, 1]),
    ];
    for (set, idx) in pair_sets(b, n, dev) {
        let s = idx.len();
        let vals_h: Vec<f32> = (0..s).map(|i| 0.25 + (i % 7) as f32 * 0.3).collect();
        for (layout, groups) in &layouts {
            let ends = prefix_ends(groups);
            for coefs in [
                dl_coefs(groups.len(), b),
                (0..groups.len()).map(|g| 0.5 + g as f64).collect(),
            ] {
                for with_sink in [false, true] {
                    let what = format!("{set}, {layout}, coefs {coefs:?}, sink {with_sink}");
                    let x = uniform(b * d, 1, dev)?.reshape((b, d))?;
                    let vals = Var::from_tensor(&Tensor::from_vec(vals_h.clone(), s, dev)?)?;
                    let w = Var::from_tensor(&uniform(n * d, 2, dev)?.reshape((n, d))?)?;
                    let b_dec = Var::from_tensor(&(uniform(d, 3, dev)? * 0.1)?)?;
                    let idx_t = Tensor::from_vec(idx.clone(), s, dev)?;
                    let sink = sae::sparse::GradSink::default();
                    let out = prefix_loss(
                        &x,
                        (vals.as_tensor(), &idx_t),
                        (w.as_tensor(), b_dec.as_tensor()),
                        (&ends, &coefs),
                        with_sink.then_some(&sink),
                    )?;
                    let grads = (&out.loss * 1.5)?.backward()?;
                    let want = prefix_reference(
                        &host(&x)?,
                        &host(vals.as_tensor())?,
                        &idx,
                        &host(w.as_tensor())?,
                        &host(b_dec.as_tensor())?,
                        &ends,
                        &coefs,
                        (b, n, d),
                    );
                    let loss = out.loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
                    assert!(
                        (loss - want.loss).abs() < 1e-5 * want.loss.max(1.0),
                        "{what}: loss {loss} vs {}",
                        want.loss
                    );
                    assert_close(
                        &host(&out.recon)?,
                        &want.recon,
                        1e-5,
                        &format!("{what}: recon"),
                    );
                    let scaled = |v: &[f64]| v.iter().map(|g| 1.5 * g).collect::<Vec<_>>();
                    let d_w = match with_sink {
                        true => {
                            assert!(grads.get(w.as_tensor()).is_none(), "{what}: dW in autograd");
                            sink.take()?.expect("dW in the sink")
                        }
                        false => grads.get(w.as_tensor()).expect("dW").clone(),
                    };
                    assert_close(
                        &host(&d_w)?,
                        &scaled(&want.d_w),
                        1e-5,
                        &format!("{what}: dW"),
                    );
                    let d_b = grads.get(b_dec.as_tensor()).expect("d b_dec");
                    assert_close(
                        &host(d_b)?,
                        &scaled(&want.d_b_dec),
                        1e-5,
                        &format!("{what}: d b_dec"),
                    );
                    if s > 0 {
                        let dv = grads.get(vals.as_tensor()).expect("d vals");
                        assert_close(
                            &host(dv)?,
                            &scaled(&want.d_vals),
                            1e-5,
                            &format!("{what}: d vals"),
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
test_device!(
    prefix_loss_matches_reference_on,
    prefix_loss_matches_reference
);

/// Large enough that a latent gathers many pairs and a row many groups: two runs agree bit for bit, and
/// the device agrees with the CPU to rounding.
fn prefix_loss_is_deterministic_and_matches_cpu(dev: &Device) -> Result<()> {
    let (b, n, d) = (256, 64, 96);
    let groups = [5, 11, 16, 32];
    let ends = prefix_ends(&groups);
    let coefs = dl_coefs(groups.len(), b);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
    let idx: Vec<i64> = (0..(b * n) as i64)
        .filter(|i| i % n as i64 == 7 || rng.random::<f32>() < 0.1)
        .collect();
    let run = |dev: &Device| -> Result<Vec<Vec<f64>>> {
        let x = uniform(b * d, 4, dev)?.reshape((b, d))?;
        let vals = Var::from_tensor(&uniform(idx.len(), 5, dev)?)?;
        let w = Var::from_tensor(&uniform(n * d, 6, dev)?.reshape((n, d))?)?;
        let b_dec = Var::from_tensor(&uniform(d, 7, dev)?)?;
        let idx_t = Tensor::from_vec(idx.clone(), idx.len(), dev)?;
        let out = prefix_loss(
            &x,
            (vals.as_tensor(), &idx_t),
            (w.as_tensor(), b_dec.as_tensor()),
            (&ends, &coefs),
            None,
        )?;
        let grads = out.loss.backward()?;
        let mut v = vec![host(&out.loss)?, host(&out.recon)?];
        for var in [&vals, &w, &b_dec] {
            v.push(host(grads.get(var.as_tensor()).expect("gradient"))?);
        }
        Ok(v)
    };
    let (a, again, cpu) = (run(dev)?, run(dev)?, run(&Device::Cpu)?);
    assert_eq!(a, again, "two runs differ");
    for (i, (x, y)) in a.iter().zip(&cpu).enumerate() {
        assert_close(x, y, 1e-5, &format!("output {i} against the CPU"));
    }
    Ok(())
}
test_device!(
    prefix_loss_deterministic_on,
    prefix_loss_is_deterministic_and_matches_cpu
);

/// The model's parameters in the internal layout (W_enc as [n, d] rows), as f64.
struct Params {
    w_enc: Vec<f64>,
    b_enc: Vec<f64>,
    w_dec: Vec<f64>,
    b_dec: Vec<f64>,
}

/// The aux-k loss's inputs in the reference: the dead mask, k_aux and its coefficient.
struct AuxSpec<'a> {
    dead: &'a [u8],
    k_aux: usize,
    alpha: f64,
}

/// f64 reference of a whole training loss and its gradients [W_enc rows, b_enc, W_dec, b_dec], the way
/// dictionary_learning's trainers define it: `pre = ReLU((x − b_dec)·W_enc + b_enc)`, the B·k largest
/// of `pre` over the batch kept (a full sort, value descending, index ascending), the prefix losses with
/// weights `coefs` (one prefix of n with weight 1/B: BatchTopK's l2 loss), and with `aux` the aux-k
/// loss: each row's k_aux largest `pre` among the dead latents reconstruct the residual x − x̂ (of the
/// whole dictionary, detached) without b_dec, its mean over tokens of ‖·‖² divided by the residual's
/// variance (mean over tokens of ‖r − mean(r)‖²), times alpha.
fn loss_reference(
    x: &[f64],
    p: &Params,
    (b, n, d, k): (usize, usize, usize, usize),
    (ends, coefs): (&[usize], &[f64]),
    aux: Option<&AuxSpec>,
) -> (f64, [Vec<f64>; 4]) {
    let xc: Vec<f64> = (0..b * d).map(|i| x[i] - p.b_dec[i % d]).collect();
    let mut pre = vec![0.0; b * n];
    for r in 0..b {
        for j in 0..n {
            let dot: f64 = (0..d).map(|c| xc[r * d + c] * p.w_enc[j * d + c]).sum();
            pre[r * n + j] = (dot + p.b_enc[j]).max(0.0);
        }
    }
    let mut order: Vec<usize> = (0..b * n).collect();
    order.sort_by(|&i, &j| pre[j].total_cmp(&pre[i]).then(i.cmp(&j)));
    let mut idx: Vec<i64> = order[..b * k].iter().map(|&i| i as i64).collect();
    idx.sort();
    let vals: Vec<f64> = idx.iter().map(|&i| pre[i as usize]).collect();
    let main = prefix_reference(x, &vals, &idx, &p.w_dec, &p.b_dec, ends, coefs, (b, n, d));
    let mut loss = main.loss;
    let mut d_w_dec = main.d_w.clone();
    let mut d_b_dec = main.d_b_dec.clone();
    // The gradient of every pre-activation [B, n] (zero where the ReLU is off).
    let mut d_pre = vec![0.0; b * n];
    for (s, &i) in idx.iter().enumerate() {
        if pre[i as usize] > 0.0 {
            d_pre[i as usize] += main.d_vals[s];
        }
    }
    if let Some(a) = aux {
        let n_dead = a.dead.iter().filter(|&&v| v != 0).count();
        let keep = a.k_aux.min(n_dead);
        let r: Vec<f64> = (0..b * d).map(|i| x[i] - main.recon[i]).collect();
        let mut acts = vec![0.0; b * n];
        for row in 0..b {
            let mut cand: Vec<usize> = (0..n).filter(|&j| a.dead[j] != 0).collect();
            cand.sort_by(|&i, &j| {
                pre[row * n + j]
                    .total_cmp(&pre[row * n + i])
                    .then(i.cmp(&j))
            });
            for &j in &cand[..keep] {
                acts[row * n + j] = pre[row * n + j];
            }
        }
        let mean: Vec<f64> = (0..d)
            .map(|c| (0..b).map(|row| r[row * d + c]).sum::<f64>() / b as f64)
            .collect();
        let denom = (0..b * d)
            .map(|i| (r[i] - mean[i % d]).powi(2))
            .sum::<f64>()
            / b as f64;
        let mut g = vec![0.0; b * d];
        for row in 0..b {
            for c in 0..d {
                let rec: f64 = (0..n).map(|j| acts[row * n + j] * p.w_dec[j * d + c]).sum();
                let diff = r[row * d + c] - rec;
                loss += a.alpha * diff * diff / (b as f64 * denom);
                g[row * d + c] = -2.0 * a.alpha * diff / (b as f64 * denom);
            }
        }
        for row in 0..b {
            for j in 0..n {
                let act = acts[row * n + j];
                if act <= 0.0 {
                    continue;
                }
                let mut da = 0.0;
                for c in 0..d {
                    d_w_dec[j * d + c] += act * g[row * d + c];
                    da += g[row * d + c] * p.w_dec[j * d + c];
                }
                d_pre[row * n + j] += da;
            }
        }
    }
    let mut d_w_enc = vec![0.0; n * d];
    let mut d_b_enc = vec![0.0; n];
    for row in 0..b {
        for j in 0..n {
            let dp = d_pre[row * n + j];
            if dp == 0.0 {
                continue;
            }
            d_b_enc[j] += dp;
            for c in 0..d {
                d_w_enc[j * d + c] += dp * xc[row * d + c];
                d_b_dec[c] -= dp * p.w_enc[j * d + c];
            }
        }
    }
    (loss, [d_w_enc, d_b_enc, d_w_dec, d_b_dec])
}

/// An SAE of `arch` over `layers` × `d_model` inputs from internal-layout tensors, in `decode` form,
/// with the training path's weight sinks when `sinks`.
fn model(
    (arch, layers, d_model, groups): (Arch, usize, usize, &[usize]),
    (n, k): (usize, usize),
    params: &[Tensor; 4],
    decode: DecodeMode,
    sinks: bool,
) -> Result<Sae> {
    let shape = Shape {
        arch,
        d_model,
        layers,
        n,
        k,
        groups: groups.to_vec(),
    };
    let mut sae = Sae::from_rows(shape, params.each_ref(), decode)?;
    if sinks {
        sae.sinks = Some(Default::default());
    }
    Ok(sae)
}

/// The training loss (the architecture's, plus the aux-k loss times its coefficient when given) and the
/// gradients of every parameter as the trainer collects them.
fn training_loss(
    sae: &Sae,
    x: &Tensor,
    aux: Option<(&Tensor, usize, usize, f64, AuxDecode)>,
) -> Result<(f64, Vec<Vec<f64>>)> {
    let loss = match aux {
        Some((mask, n_dead, k_aux, alpha, form)) => {
            let (fwd, a) = common::forward_and_aux(sae, x, None, (mask, n_dead), k_aux, form)?;
            (fwd.loss + (a * alpha)?)?
        }
        None => sae::arch::forward(sae, x, profk::Selector::Profk, 0)?.loss,
    };
    let grads = sae::optim::collect_grads(sae, &loss.backward()?)?;
    let value = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
    Ok((value, grads.iter().map(host).collect::<Result<_>>()?))
}

/// Random parameters for an SAE of n latents over d inputs, W_enc as [n, d] rows; latents in `off` get
/// a large negative encoder bias, so that they never fire.
fn random_params(
    n: usize,
    d: usize,
    seed: u64,
    off: &[usize],
    dev: &Device,
) -> Result<[Tensor; 4]> {
    let mut b_enc: Vec<f32> = host(&(uniform(n, seed + 1, &Device::Cpu)? * 0.1)?)?
        .iter()
        .map(|&v| v as f32)
        .collect();
    for &j in off {
        b_enc[j] = -100.0;
    }
    Ok([
        uniform(n * d, seed, dev)?.reshape((n, d))?,
        Tensor::from_vec(b_enc, n, dev)?,
        uniform(n * d, seed + 2, dev)?.reshape((n, d))?,
        (uniform(d, seed + 3, dev)? * 0.1)?,
    ])
}

fn host_params(p: &[Tensor; 4]) -> Result<Params> {
    Ok(Params {
        w_enc: host(&p[0])?,
        b_enc: host(&p[1])?,
        w_dec: host(&p[2])?,
        b_dec: host(&p[3])?,
    })
}

fn check_grads(got: &[Vec<f64>], want: &[Vec<f64>; 4], what: &str) {
    for (i, name) in ["W_enc", "b_enc", "W_dec", "b_dec"].iter().enumerate() {
        assert_close(
            &got[i],
            &want[i],
            1e-4,
            &format!("{what}: gradient of {name}"),
        );
    }
}

/// The whole Matryoshka training loss (encoder, selection, prefix losses) and every parameter's
/// gradient against the dense f64 reference, sparse and dense forms, with and without the weight sinks;
/// group layouts with one group (which is BatchTopK, checked against it too), groups of one latent and a
/// group whose latents never fire.
fn matryoshka_matches_reference(dev: &Device) -> Result<()> {
    let (b, d, n, k) = (6, 5, 12, 2);
    let x = uniform(b * d, 31, dev)?.reshape((b, d))?;
    let layouts: Vec<(&str, Vec<usize>, Vec<usize>)> = vec![
        ("one group", vec![12], vec![]),
        ("three groups", vec![2, 4, 6], vec![]),
        ("groups of one", vec![1, 1, 10], vec![]),
        ("a group that never fires", vec![3, 4, 5], vec![3, 4, 5, 6]),
    ];
    for (layout, groups, off) in layouts {
        let params = random_params(n, d, 40, &off, dev)?;
        let ends = prefix_ends(&groups);
        let coefs = dl_coefs(groups.len(), b);
        let (want_loss, want) = loss_reference(
            &host(&x)?,
            &host_params(&params)?,
            (b, n, d, k),
            (&ends, &coefs),
            None,
        );
        for decode in [DecodeMode::Sparse, DecodeMode::Dense] {
            for sinks in [false, true] {
                let what = format!("{layout}, {decode:?}, sinks {sinks}");
                let sae = model(
                    (Arch::Matryoshka, 1, d, &groups),
                    (n, k),
                    &params,
                    decode,
                    sinks,
                )?;
                let (loss, grads) = training_loss(&sae, &x, None)?;
                assert!(
                    (loss - want_loss).abs() < 1e-5 * want_loss.max(1.0),
                    "{what}: loss {loss} vs {want_loss}"
                );
                check_grads(&grads, &want, &what);
                if groups.len() == 1 {
                    let bt = model((Arch::Batchtopk, 1, d, &[]), (n, k), &params, decode, sinks)?;
                    let (bt_loss, bt_grads) = training_loss(&bt, &x, None)?;
                    assert!((loss - bt_loss).abs() < 1e-6, "{what}: BatchTopK's loss");
                    for (g, h) in grads.iter().zip(&bt_grads) {
                        assert!(max_err(g, h) < 1e-6, "{what}: BatchTopK's gradients");
                    }
                }
            }
        }
    }
    Ok(())
}
test_device!(
    matryoshka_matches_reference_on,
    matryoshka_matches_reference
);

/// The crosscoder over 3 layers of d is a BatchTopK SAE over the stacked 3·d inputs: its loss and
/// gradients match the f64 reference of that wide SAE, and a few training steps of each from the same
/// stacked inputs reach the same weights bit for bit.
fn crosscoder_is_a_wide_batchtopk(dev: &Device) -> Result<()> {
    let (b, layers, d, n, k) = (6, 3, 4, 12, 3);
    let wide = layers * d;
    let x = uniform(b * wide, 51, dev)?.reshape((b, wide))?;
    let params = random_params(n, wide, 60, &[], dev)?;
    let (want_loss, want) = loss_reference(
        &host(&x)?,
        &host_params(&params)?,
        (b, n, wide, k),
        (&[n], &[1.0 / b as f64]),
        None,
    );
    for decode in [DecodeMode::Sparse, DecodeMode::Dense] {
        for sinks in [false, true] {
            let what = format!("{decode:?}, sinks {sinks}");
            let cc = model(
                (Arch::Crosscoder, layers, d, &[]),
                (n, k),
                &params,
                decode,
                sinks,
            )?;
            let (loss, grads) = training_loss(&cc, &x, None)?;
            assert!(
                (loss - want_loss).abs() < 1e-5 * want_loss.max(1.0),
                "{what}: loss {loss} vs {want_loss}"
            );
            check_grads(&grads, &want, &what);
        }
    }
    // Whole training steps (aux-k on: every latent dead) from the same raw inputs: the crosscoder on
    // [B, 3, d], BatchTopK on the same values as [B, 1, 3·d].
    let step_cfg = |arch: &str, layers: usize| -> Result<sae::Config> {
        let text = common::synthetic_config(arch, "", layers)
            .replace("dead_tokens = 512", "dead_tokens = 0")
            .replace("[sae]\n", "[sae]\nnormalize_input = false\n");
        Ok(sae::Config::from_toml(&text)?)
    };
    let raw = uniform(64 * 48, 52, &Device::Cpu)?;
    let (raw_cc, raw_bt) = (raw.reshape((64, 3, 16))?, raw.reshape((64, 1, 48))?);
    let mut cc = sae::Trainer::new(step_cfg("crosscoder", 3)?, &raw_cc, dev)?;
    let mut bt = sae::Trainer::new(step_cfg("batchtopk", 1)?, &raw_bt, dev)?;
    for step in 0..3 {
        let (a, c) = (cc.train_step(&raw_cc, true)?, bt.train_step(&raw_bt, true)?);
        assert!(a.aux_loss > 0.0, "aux-k did not run");
        assert_eq!((a.loss, a.grad_norm), (c.loss, c.grad_norm), "step {step}");
    }
    for (p, q) in cc.sae.vars().iter().zip(bt.sae.vars()) {
        assert_eq!(host(p.as_tensor())?, host(q.as_tensor())?, "weights differ");
    }
    Ok(())
}
test_device!(
    crosscoder_is_a_wide_batchtopk_on,
    crosscoder_is_a_wide_batchtopk
);

/// The aux-k loss where it works: 90 % of the latents dead, k_aux below and above the dead count, both
/// forms (the selected pairs; the dense matmuls over the dead columns), BatchTopK and Matryoshka (whose
/// residual is the whole dictionary's), inside the whole training loss with its coefficient, against
/// dictionary_learning's formula in f64: loss and every parameter's gradient.
fn aux_k_with_most_latents_dead_matches_reference(dev: &Device) -> Result<()> {
    let (b, d, n, k) = (16, 12, 40, 3);
    let alpha = 1.0 / 32.0;
    let x = uniform(b * d, 71, dev)?.reshape((b, d))?;
    let params = random_params(n, d, 80, &[], dev)?;
    // 90 % dead: every latent but each tenth.
    let dead: Vec<u8> = (0..n).map(|j| (j % 10 != 0) as u8).collect();
    let n_dead = dead.iter().filter(|&&v| v != 0).count();
    let mask = Tensor::from_vec(dead.clone(), n, dev)?;
    let archs: Vec<(Arch, Vec<usize>)> = vec![
        (Arch::Batchtopk, vec![]),
        (Arch::Matryoshka, vec![8, 12, 20]),
    ];
    for (arch, groups) in archs {
        let (ends, coefs) = match groups.is_empty() {
            true => (vec![n], vec![1.0 / b as f64]),
            false => (prefix_ends(&groups), dl_coefs(groups.len(), b)),
        };
        for k_aux in [6, 50] {
            let spec = AuxSpec {
                dead: &dead,
                k_aux,
                alpha,
            };
            let (want_loss, want) = loss_reference(
                &host(&x)?,
                &host_params(&params)?,
                (b, n, d, k),
                (&ends, &coefs),
                Some(&spec),
            );
            let (main_loss, _) = loss_reference(
                &host(&x)?,
                &host_params(&params)?,
                (b, n, d, k),
                (&ends, &coefs),
                None,
            );
            assert!(
                want_loss - main_loss > 1e-3 * alpha,
                "the aux-k term is negligible"
            );
            for form in [AuxDecode::Sparse, AuxDecode::Dense] {
                let what = format!("{arch:?}, k_aux {k_aux}, {form:?}");
                let sae = model(
                    (arch, 1, d, &groups),
                    (n, k),
                    &params,
                    DecodeMode::Sparse,
                    true,
                )?;
                let aux = Some((&mask, n_dead, k_aux, alpha, form));
                let (loss, grads) = training_loss(&sae, &x, aux)?;
                assert!(
                    (loss - want_loss).abs() < 1e-5 * want_loss.max(1.0),
                    "{what}: loss {loss} vs {want_loss}"
                );
                check_grads(&grads, &want, &what);
            }
        }
    }
    Ok(())
}
test_device!(
    aux_k_with_most_latents_dead_on,
    aux_k_with_most_latents_dead_matches_reference
);
