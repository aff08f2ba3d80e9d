//! Every architecture's forward and loss against a dense reference computed independently on the host in
//! f64, and the sparse decoder against the dense one, forward and backward.
use crate::common;
use candle_core::{DType, Device, Tensor, Var};
use common::{max_abs_diff, randn};
use sae::config::{Arch, AuxDecode, DecodeMode};
use sae::model::{Sae, Shape};
use sae::sparse::{dense_decode, gather_decode, sparse_decode};

fn to_f64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Dense host reference: pre-activations, batch-global top-(B·k) by full sort, reconstruction, and the
/// loss over prefixes `ends` as dictionary_learning's Matryoshka trainer weighs them: the mean over the G
/// prefixes of (1/G)·(mean over tokens of ‖x − x̂‖²); one prefix is BatchTopK's loss.
#[allow(clippy::too_many_arguments)] // a plain host reference, kept free of the crate's types
fn reference(
    x: &[f64],
    b: usize,
    d: usize,
    we: &[f64],
    be: &[f64],
    wd: &[f64],
    bd: &[f64],
    n: usize,
    k: usize,
    ends: &[usize],
) -> (Vec<f64>, f64) {
    let mut pre = vec![0f64; b * n];
    for r in 0..b {
        for j in 0..n {
            let mut s = be[j];
            for i in 0..d {
                s += (x[r * d + i] - bd[i]) * we[i * n + j];
            }
            pre[r * n + j] = s.max(0.0);
        }
    }
    let mut order: Vec<usize> = (0..b * n).collect();
    order.sort_by(|&p, &q| pre[q].partial_cmp(&pre[p]).unwrap().then(p.cmp(&q)));
    let mut acts = vec![0f64; b * n];
    for &p in &order[..b * k] {
        acts[p] = pre[p];
    }
    let mut loss = 0.0;
    let mut recon = vec![0f64; b * d];
    let weight = 1.0 / (ends.len() * ends.len()) as f64;
    for &end in ends {
        for r in 0..b {
            for i in 0..d {
                let mut s = bd[i];
                for j in 0..end {
                    s += acts[r * n + j] * wd[j * d + i];
                }
                recon[r * d + i] = s;
                loss += weight * (x[r * d + i] - s).powi(2) / b as f64;
            }
        }
    }
    (recon, loss)
}

fn check_arch(arch: Arch, layers: usize, groups: Vec<usize>, decode: DecodeMode) {
    let (b, d_model, n, k) = (6, 5, 12, 3);
    let d = d_model * layers;
    let shape = Shape {
        arch,
        d_model,
        layers,
        n,
        k,
        groups: groups.clone(),
    };
    let params = [
        randn(&[d, n], 1),
        (randn(&[n], 2) * 0.1).unwrap(),
        randn(&[n, d], 3),
        (randn(&[d], 4) * 0.1).unwrap(),
    ];
    let sae = Sae::from_tensors(shape, params.each_ref(), decode).unwrap();
    let x = randn(&[b, d], 5);
    let fwd = sae::arch::forward(&sae, &x, profk::Selector::Profk, 0).unwrap();
    let ends: Vec<usize> = if groups.is_empty() {
        vec![n]
    } else {
        sae::arch::matryoshka::prefix_ends(&groups)
    };
    let (recon, loss) = reference(
        &to_f64(&x),
        b,
        d,
        &to_f64(&sae.w_enc_saelens().unwrap()),
        &to_f64(sae.b_enc.as_tensor()),
        &to_f64(sae.w_dec.as_tensor()),
        &to_f64(sae.b_dec.as_tensor()),
        n,
        k,
        &ends,
    );
    let got = to_f64(&fwd.recon);
    let err = got
        .iter()
        .zip(&recon)
        .map(|(a, b)| (a - b).abs())
        .fold(0f64, f64::max);
    assert!(err < 1e-4, "{arch:?} {decode:?}: recon differs by {err}");
    let l = fwd
        .loss
        .to_dtype(DType::F64)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    assert!(
        (l - loss).abs() < 1e-4 * loss.max(1.0),
        "{arch:?} {decode:?}: loss {l} vs reference {loss}"
    );
}

#[test]
fn every_arch_matches_dense_reference_in_both_decode_modes() {
    for (arch, layers, groups) in [
        (Arch::Batchtopk, 1, vec![]),
        (Arch::Matryoshka, 1, vec![2, 4, 6]),
        (Arch::Crosscoder, 3, vec![]),
    ] {
        for decode in [DecodeMode::Sparse, DecodeMode::Dense] {
            check_arch(arch, layers, groups.clone(), decode);
        }
    }
}

#[test]
fn sparse_decode_forward_and_backward_equal_dense() {
    let (b, n, d) = (7, 20, 9);
    // Unsorted, with repeated columns and an empty row.
    let idx: Vec<i64> = vec![45, 3, 19, 22, 60, 61, 100, 119, 0, 44, 23, 139, 80, 85];
    let s = idx.len();
    let idx_t = Tensor::from_vec(idx, s, &Device::Cpu).unwrap();
    let vals = Var::from_tensor(&randn(&[s], 11)).unwrap();
    let w = Var::from_tensor(&randn(&[n, d], 12)).unwrap();
    let probe = randn(&[b, d], 13);
    let run = |f: &dyn Fn(&Tensor, &Tensor, &Tensor, usize) -> sae::Result<Tensor>| {
        let out = f(vals.as_tensor(), &idx_t, w.as_tensor(), b).unwrap();
        let g = (&out * &probe)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        (
            out,
            g.get(vals.as_tensor()).unwrap().clone(),
            g.get(w.as_tensor()).unwrap().clone(),
        )
    };
    let (o_ref, gv_ref, gw_ref) = run(&dense_decode);
    for (name, f) in [
        (
            "sparse",
            &sparse_decode as &dyn Fn(&Tensor, &Tensor, &Tensor, usize) -> sae::Result<Tensor>,
        ),
        ("gather", &gather_decode),
    ] {
        let (o, gv, gw) = run(f);
        assert!(max_abs_diff(&o, &o_ref) < 1e-5, "{name} forward");
        assert!(max_abs_diff(&gv, &gv_ref) < 1e-5, "{name} d values");
        assert!(max_abs_diff(&gw, &gw_ref) < 1e-5, "{name} d weights");
    }
}

#[test]
fn sparse_decode_rejects_out_of_range_index() {
    let idx = Tensor::new(&[3i64, 99], &Device::Cpu).unwrap();
    let r = sparse_decode(&randn(&[2], 1), &idx, &randn(&[5, 4], 2), 2);
    assert!(r.is_err());
}

#[test]
fn decoder_projection_and_normalization() {
    let w = Var::from_tensor(&randn(&[8, 6], 21)).unwrap();
    sae::optim::normalize_rows(&w).unwrap();
    let norms: Vec<f32> = w
        .as_tensor()
        .sqr()
        .unwrap()
        .sum(1)
        .unwrap()
        .to_vec1()
        .unwrap();
    assert!(norms.iter().all(|v| (v - 1.0).abs() < 1e-5), "{norms:?}");
    let g = randn(&[8, 6], 22);
    let p = sae::optim::project_decoder_grad(w.as_tensor(), &g).unwrap();
    let dots: Vec<f32> = (&p * w.as_tensor())
        .unwrap()
        .sum(1)
        .unwrap()
        .to_vec1()
        .unwrap();
    assert!(
        dots.iter().all(|v| v.abs() < 1e-5),
        "parallel component left: {dots:?}"
    );
    // The orthogonal part is untouched: g − p is parallel to w.
    let diff = (&g - &p).unwrap();
    let cos: Vec<f32> = (&diff * w.as_tensor())
        .unwrap()
        .sum(1)
        .unwrap()
        .to_vec1()
        .unwrap();
    let dn: Vec<f32> = diff
        .sqr()
        .unwrap()
        .sum(1)
        .unwrap()
        .sqrt()
        .unwrap()
        .to_vec1()
        .unwrap();
    for (c, n) in cos.iter().zip(&dn) {
        assert!((c.abs() - n).abs() < 1e-4);
    }
}

#[test]
fn geometric_median_resists_an_outlier() {
    let mut rows = vec![0f32; 0];
    for i in 0..9 {
        rows.extend([1.0 + 0.01 * i as f32, 2.0]);
    }
    rows.extend([1000.0, -1000.0]);
    let x = Tensor::from_vec(rows, (10, 2), &Device::Cpu).unwrap();
    let m = sae::init::geometric_median(&x, 200).unwrap();
    assert!(
        (m[0] - 1.04).abs() < 0.1 && (m[1] - 2.0).abs() < 0.1,
        "{m:?}"
    );
}

#[test]
fn aux_loss_sparse_equals_dense() {
    let (b, d, n, k) = (8, 6, 16, 2);
    let shape = common::batchtopk_shape(d, n, k);
    let make = |mode| {
        let params = [
            randn(&[d, n], 31),
            randn(&[n], 32),
            randn(&[n, d], 33),
            randn(&[d], 34),
        ];
        Sae::from_tensors(shape.clone(), params.each_ref(), mode).unwrap()
    };
    let x = randn(&[b, d], 35);
    let mut dead = vec![0u8; n];
    for j in (0..n).step_by(2) {
        dead[j] = 1;
    }
    let mask = Tensor::from_vec(dead, n, &Device::Cpu).unwrap();
    let mut losses = Vec::new();
    for mode in [DecodeMode::Sparse, DecodeMode::Dense] {
        let sae = make(mode);
        let (_, aux) =
            common::forward_and_aux(&sae, &x, None, (&mask, n / 2), 3, AuxDecode::Auto).unwrap();
        let g = aux.backward().unwrap();
        losses.push((
            aux.to_scalar::<f32>().unwrap(),
            g.get(sae.w_dec.as_tensor()).unwrap().clone(),
        ));
    }
    assert!(
        (losses[0].0 - losses[1].0).abs() < 1e-5,
        "{} vs {}",
        losses[0].0,
        losses[1].0
    );
    assert!(max_abs_diff(&losses[0].1, &losses[1].1) < 1e-5);
}
