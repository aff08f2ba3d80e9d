//! Error feedback: nothing is lost, and the selection picks exactly the largest accumulated magnitudes.
use candle_core::{Device, Tensor, Var};
use gradsparse::select::{k_for, Scope, SelectorChoice};
use gradsparse::{ErrorFeedback, FlatLayout};
use profk::Selector;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn layout(sizes: &[(&str, &[usize])]) -> FlatLayout {
    let named: Vec<(String, Var)> = sizes
        .iter()
        .map(|(n, s)| {
            (
                n.to_string(),
                Var::zeros(*s, candle_core::DType::F32, &Device::Cpu).unwrap(),
            )
        })
        .collect();
    FlatLayout::new(&named).unwrap()
}

fn shapes() -> FlatLayout {
    layout(&[
        ("b.weight", &[7, 5]),
        ("a.bias", &[3]),
        ("c.weight", &[11, 4]),
        ("d", &[1]),
    ])
}

/// Every span with its gradient.
fn some(grads: &[Tensor]) -> Vec<Option<Tensor>> {
    grads.iter().cloned().map(Some).collect()
}

fn random_grads(layout: &FlatLayout, rng: &mut ChaCha8Rng) -> Vec<Tensor> {
    layout
        .spans()
        .iter()
        .map(|s| {
            let v: Vec<f32> = (0..s.len).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            Tensor::from_vec(v, s.shape.clone(), &Device::Cpu).unwrap()
        })
        .collect()
}

fn flat(grads: &[Tensor]) -> Vec<f64> {
    grads
        .iter()
        .flat_map(|g| g.flatten_all().unwrap().to_vec1::<f32>().unwrap())
        .map(f64::from)
        .collect()
}

fn choice(kind: Selector, compare: Option<Selector>) -> SelectorChoice {
    SelectorChoice {
        kind,
        compare_with: compare,
    }
}

/// After every step: residual + Σ applied == Σ accumulated (gradients, or DGC velocities).
fn check_invariant(scope: Scope, momentum: Option<f64>) {
    let layout = shapes();
    let mut ef = ErrorFeedback::new(layout.clone(), momentum, &Device::Cpu).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let n = layout.total();
    let (mut accumulated, mut applied, mut velocity) =
        (vec![0f64; n], vec![0f64; n], vec![0f64; n]);
    for step in 0..12 {
        let grads = random_grads(&layout, &mut rng);
        for (i, g) in flat(&grads).into_iter().enumerate() {
            velocity[i] = momentum.map_or(g, |mu| mu * velocity[i] + g);
            accumulated[i] += velocity[i];
        }
        ef.accumulate(&some(&grads)).unwrap();
        let sel = ef
            .select(0.1, scope, &choice(Selector::Profk, None), step)
            .unwrap();
        let idx = sel.indices.to_vec1::<i64>().unwrap();
        let vals = sel.values.to_vec1::<f32>().unwrap();
        assert!(!idx.is_empty());
        ef.release(&sel).unwrap();
        for (&i, &v) in idx.iter().zip(&vals) {
            applied[i as usize] += v as f64;
            if momentum.is_some() {
                velocity[i as usize] = 0.0;
            }
        }
        let residual = ef.residual().to_vec1::<f32>().unwrap();
        for i in 0..n {
            let lhs = residual[i] as f64 + applied[i];
            assert!(
                (lhs - accumulated[i]).abs() < 1e-4,
                "step {step} coord {i}: {lhs} vs {}",
                accumulated[i]
            );
        }
        for &i in &idx {
            assert_eq!(
                residual[i as usize], 0.0,
                "selected coordinate {i} keeps no residual"
            );
        }
    }
}

#[test]
fn nothing_is_lost_global() {
    check_invariant(Scope::Global, None);
}

#[test]
fn nothing_is_lost_per_tensor() {
    check_invariant(Scope::PerTensor, None);
}

#[test]
fn nothing_is_lost_with_momentum_correction() {
    check_invariant(Scope::Global, Some(0.9));
}

/// Reference: indices of the k largest |x| (ties by lowest index), ascending.
fn reference_topk(x: &[f64], k: usize) -> Vec<i64> {
    let mut ids: Vec<usize> = (0..x.len()).collect();
    ids.sort_by(|&a, &b| x[b].abs().partial_cmp(&x[a].abs()).unwrap().then(a.cmp(&b)));
    let mut top: Vec<i64> = ids[..k].iter().map(|&i| i as i64).collect();
    top.sort_unstable();
    top
}

#[test]
fn global_and_per_tensor_select_the_reference_sets() {
    let layout = shapes();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let grads = random_grads(&layout, &mut rng);
    let x = flat(&grads);
    let density = 0.2;
    for kind in [Selector::Profk, Selector::Sort, Selector::Radix] {
        let mut ef = ErrorFeedback::new(layout.clone(), None, &Device::Cpu).unwrap();
        ef.accumulate(&some(&grads)).unwrap();

        let global = ef
            .select(density, Scope::Global, &choice(kind, None), 0)
            .unwrap();
        assert_eq!(
            global.indices.to_vec1::<i64>().unwrap(),
            reference_topk(&x, k_for(density, x.len())),
            "{kind:?} global"
        );

        let per = ef
            .select(density, Scope::PerTensor, &choice(kind, None), 0)
            .unwrap();
        let mut expect = Vec::new();
        for span in layout.spans() {
            let part = &x[span.offset..span.offset + span.len];
            expect.extend(
                reference_topk(part, k_for(density, span.len))
                    .into_iter()
                    .map(|i| i + span.offset as i64),
            );
        }
        assert_eq!(
            per.indices.to_vec1::<i64>().unwrap(),
            expect,
            "{kind:?} per tensor"
        );
        // Every tensor gets its share, at least one coordinate; the global set need not.
        for span in layout.spans() {
            let idx = per.indices.to_vec1::<i64>().unwrap();
            let inside = idx
                .iter()
                .filter(|&&i| (i as usize) >= span.offset && (i as usize) < span.offset + span.len)
                .count();
            assert_eq!(inside, k_for(density, span.len), "{}", span.name);
        }
        // Values are the signed accumulated values at the indices.
        let vals = global.values.to_vec1::<f32>().unwrap();
        for (&i, &v) in global.indices.to_vec1::<i64>().unwrap().iter().zip(&vals) {
            assert_eq!(v as f64, x[i as usize]);
        }
    }
}

#[test]
fn compare_mode_accepts_agreeing_selectors() {
    let layout = shapes();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut ef = ErrorFeedback::new(layout.clone(), None, &Device::Cpu).unwrap();
    // Ties at the k-th magnitude: both selectors must break them by lowest index.
    let tied: Vec<Tensor> = layout
        .spans()
        .iter()
        .map(|s| {
            let v: Vec<f32> = (0..s.len)
                .map(|_| [0.5f32, -0.5, 0.25][rng.random_range(0..3)])
                .collect();
            Tensor::from_vec(v, s.shape.clone(), &Device::Cpu).unwrap()
        })
        .collect();
    ef.accumulate(&some(&tied)).unwrap();
    for scope in [Scope::Global, Scope::PerTensor] {
        for (a, b) in [
            (Selector::Profk, Selector::Sort),
            (Selector::Radix, Selector::Profk),
            (Selector::Sort, Selector::Radix),
        ] {
            let sel = ef.select(0.3, scope, &choice(a, Some(b)), 5).unwrap();
            assert!(sel.compare_time.is_some());
        }
    }
}

#[test]
fn accumulate_rejects_mismatched_gradients() {
    let layout = shapes();
    let mut ef = ErrorFeedback::new(layout.clone(), None, &Device::Cpu).unwrap();
    let mut grads = random_grads(&layout, &mut ChaCha8Rng::seed_from_u64(1));
    grads[0] = Tensor::zeros(2, candle_core::DType::F32, &Device::Cpu).unwrap();
    let err = ef.accumulate(&some(&grads)).unwrap_err().to_string();
    assert!(err.contains(&layout.spans()[0].name), "{err}");
    grads.pop();
    assert!(ef
        .accumulate(&some(&grads))
        .unwrap_err()
        .to_string()
        .contains("gradients for"));
}
