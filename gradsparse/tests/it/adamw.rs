//! The sparse AdamW is candle-nn's dense AdamW on the coordinates it updates, and leaves the rest alone.
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use gradsparse::{AdamWParams, FlatLayout, SparseAdamW};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const LR: f64 = 0.05;

fn params() -> AdamWParams {
    AdamWParams {
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.1,
    }
}

fn dense(p: &AdamWParams) -> ParamsAdamW {
    ParamsAdamW {
        lr: LR,
        beta1: p.beta1,
        beta2: p.beta2,
        eps: p.eps,
        weight_decay: p.weight_decay,
    }
}

fn vars(seed: u64) -> Vec<(String, Var)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    [("w", vec![4, 3]), ("b", vec![5])]
        .into_iter()
        .map(|(n, s)| {
            let len: usize = s.iter().product();
            let v: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            (
                n.to_string(),
                Var::from_tensor(&Tensor::from_vec(v, s, &Device::Cpu).unwrap()).unwrap(),
            )
        })
        .collect()
}

fn ordered(named: &[(String, Var)], layout: &FlatLayout) -> Vec<Var> {
    layout
        .spans()
        .iter()
        .map(|s| named.iter().find(|(n, _)| n == &s.name).unwrap().1.clone())
        .collect()
}

fn values(vars: &[Var]) -> Vec<f32> {
    vars.iter()
        .flat_map(|v| v.flatten_all().unwrap().to_vec1::<f32>().unwrap())
        .collect()
}

fn grads(vars: &[Var], rng: &mut ChaCha8Rng) -> Vec<Tensor> {
    vars.iter()
        .map(|v| {
            let g: Vec<f32> = (0..v.elem_count())
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect();
            Tensor::from_vec(g, v.shape(), &Device::Cpu).unwrap()
        })
        .collect()
}

/// Dense AdamW's step on `vars` with these gradients (through a loss whose gradient they are).
fn dense_step(opt: &mut AdamW, vars: &[Var], grads: &[Tensor]) {
    let mut loss = Tensor::new(0f32, &Device::Cpu).unwrap();
    for (v, g) in vars.iter().zip(grads) {
        loss = (loss + (v.as_tensor() * g).unwrap().sum_all().unwrap()).unwrap();
    }
    opt.step(&loss.backward().unwrap()).unwrap();
}

#[test]
fn all_coordinates_selected_equals_dense_adamw() {
    let (a, b) = (vars(1), vars(1));
    let layout = FlatLayout::new(&a).unwrap();
    let (sparse_vars, dense_vars) = (ordered(&a, &layout), ordered(&b, &layout));
    let mut sparse = SparseAdamW::new(params(), layout.total(), &Device::Cpu).unwrap();
    let mut opt = AdamW::new(dense_vars.clone(), dense(&params())).unwrap();
    let all = Tensor::arange(0i64, layout.total() as i64, &Device::Cpu).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for _ in 0..5 {
        let g = grads(&sparse_vars, &mut rng);
        let flat = Tensor::cat(
            &g.iter()
                .map(|t| t.flatten_all().unwrap())
                .collect::<Vec<_>>(),
            0,
        )
        .unwrap();
        sparse
            .apply(&sparse_vars, &layout, &all, &flat, LR)
            .unwrap();
        dense_step(&mut opt, &dense_vars, &g);
    }
    for (s, d) in values(&sparse_vars).iter().zip(values(&dense_vars)) {
        assert!((s - d).abs() < 1e-6, "{s} vs {d}");
    }
}

#[test]
fn selected_coordinates_match_dense_and_the_rest_stay() {
    let (a, b) = (vars(4), vars(4));
    let layout = FlatLayout::new(&a).unwrap();
    let (sparse_vars, dense_vars) = (ordered(&a, &layout), ordered(&b, &layout));
    let before = values(&sparse_vars);
    let mut sparse = SparseAdamW::new(params(), layout.total(), &Device::Cpu).unwrap();
    let mut opt = AdamW::new(dense_vars.clone(), dense(&params())).unwrap();
    let g = grads(&sparse_vars, &mut ChaCha8Rng::seed_from_u64(5));
    let flat: Vec<f32> = g
        .iter()
        .flat_map(|t| t.flatten_all().unwrap().to_vec1::<f32>().unwrap())
        .collect();
    // Coordinates in both tensors, ascending.
    let chosen: Vec<i64> = vec![0, 5, 11, 12, 16];
    let idx = Tensor::new(chosen.as_slice(), &Device::Cpu).unwrap();
    let sel: Vec<f32> = chosen.iter().map(|&i| flat[i as usize]).collect();
    sparse
        .apply(
            &sparse_vars,
            &layout,
            &idx,
            &Tensor::new(sel.as_slice(), &Device::Cpu).unwrap(),
            LR,
        )
        .unwrap();
    dense_step(&mut opt, &dense_vars, &g);
    let (after, dense_after) = (values(&sparse_vars), values(&dense_vars));
    let (m, v) = sparse.moments();
    let (m, v) = (m.to_vec1::<f32>().unwrap(), v.to_vec1::<f32>().unwrap());
    for i in 0..layout.total() {
        if chosen.contains(&(i as i64)) {
            assert!(
                (after[i] - dense_after[i]).abs() < 1e-6,
                "coordinate {i}: {} vs {}",
                after[i],
                dense_after[i]
            );
            assert!(v[i] > 0.0);
        } else {
            assert_eq!(after[i], before[i], "unselected coordinate {i} moved");
            assert_eq!((m[i], v[i]), (0.0, 0.0), "unselected moments at {i} moved");
        }
    }
    assert_eq!(sparse.step_count(), 1);
    let _ = DType::F32;
}
