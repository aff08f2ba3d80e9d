//! The three gradient exchanges on the thread double, 1, 2 and 4 ranks, against plain references:
//! f64 sums of the ranks' pairs in rank order, a full sort for the global cut; and the error
//! feedback's conservation law per rank: what left the residual plus what stayed is what came in.
use candle_core::{DType, Device, Tensor, Var};
use collective::{Collective, ThreadCollective};
use gradsparse::distributed::exchange::{self, Pairs, Segment};
use gradsparse::select::SelectorChoice;
use gradsparse::{ErrorFeedback, FlatLayout, Scope, Selection};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

const N: u32 = 4000;

/// `k` distinct coordinates of rank `rank`, with values on a coarse grid (many ties in magnitude).
fn rank_pairs(rank: usize, k: usize, seed: u64) -> Pairs {
    let mut rng = ChaCha8Rng::seed_from_u64(seed * 97 + rank as u64);
    // Ranks overlap on purpose: half of the coordinates from a small shared range.
    let mut idx: Vec<u32> = sample(&mut rng, N as usize / 8, k / 2)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    while idx.len() < k {
        let i = rng.random_range(0..N);
        if !idx.contains(&i) {
            idx.push(i);
        }
    }
    idx.sort_unstable();
    let values = idx
        .iter()
        .map(|_| (rng.random_range(-8i32..=8) as f32) * 0.25 + rng.random_range(0..2) as f32 * 1e-3)
        .collect();
    Pairs {
        indices: idx,
        values,
    }
}

/// The reference sum: f64 in rank order, ÷ W, rounded once.
fn reference_mean(ranks: &[Pairs]) -> BTreeMap<u32, f32> {
    let mut sums: BTreeMap<u32, f64> = BTreeMap::new();
    for p in ranks {
        for (&i, &v) in p.indices.iter().zip(&p.values) {
            *sums.entry(i).or_insert(0.0) += v as f64;
        }
    }
    let w = ranks.len() as f64;
    sums.into_iter().map(|(i, s)| (i, (s / w) as f32)).collect()
}

/// The reference cut: a full sort by magnitude (ties to the lowest coordinate), k per segment.
fn reference_cut(mean: &BTreeMap<u32, f32>, segments: &[Segment]) -> BTreeMap<u32, f32> {
    let mut out = BTreeMap::new();
    for s in segments {
        let mut inside: Vec<(u32, f32)> =
            mean.range(s.start..s.end).map(|(&i, &v)| (i, v)).collect();
        inside.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0)));
        out.extend(inside.into_iter().take(s.k));
    }
    out
}

fn as_map(p: &Pairs) -> BTreeMap<u32, u32> {
    p.indices
        .iter()
        .zip(&p.values)
        .map(|(&i, v)| (i, v.to_bits()))
        .collect()
}

fn bits(m: &BTreeMap<u32, f32>) -> BTreeMap<u32, u32> {
    m.iter().map(|(&i, v)| (i, v.to_bits())).collect()
}

#[test]
fn sparse_sums_every_ranks_pairs_exactly() {
    for world in [1, 2, 4] {
        for seed in 0..3 {
            let out = ThreadCollective::run(world, |c| {
                let mine = rank_pairs(c.rank(), 60, seed);
                let (update, wire) = exchange::sparse_mean(&c, &mine).unwrap();
                assert_eq!(wire.sent, 60 * exchange::PAIR_BYTES);
                update
            });
            let all: Vec<Pairs> = (0..world).map(|r| rank_pairs(r, 60, seed)).collect();
            let want = bits(&reference_mean(&all));
            for (rank, update) in out.iter().enumerate() {
                assert!(update.indices.windows(2).all(|w| w[0] < w[1]));
                assert_eq!(
                    as_map(update),
                    want,
                    "world {world}, seed {seed}, rank {rank}"
                );
            }
        }
    }
}

#[test]
fn global_keeps_the_exact_top_k_of_the_sums() {
    let global = [Segment {
        start: 0,
        end: N,
        k: 50,
    }];
    // Uneven tensors; one holds few of the union's coordinates.
    let per_tensor = [
        Segment {
            start: 0,
            end: 300,
            k: 20,
        },
        Segment {
            start: 300,
            end: 3990,
            k: 25,
        },
        Segment {
            start: 3990,
            end: N,
            k: 1,
        },
    ];
    for world in [1, 2, 4] {
        for segments in [&global[..], &per_tensor[..]] {
            for seed in 0..3 {
                let k: usize = segments.iter().map(|s| s.k).sum();
                let out = ThreadCollective::run(world, |c| {
                    let mine = rank_pairs(c.rank(), 60, seed);
                    exchange::global_topk(&c, &mine, segments).unwrap().0
                });
                let all: Vec<Pairs> = (0..world).map(|r| rank_pairs(r, 60, seed)).collect();
                let want = bits(&reference_cut(&reference_mean(&all), segments));
                for update in &out {
                    assert_eq!(update.len(), want.len().min(k));
                    assert_eq!(as_map(update), want, "world {world}, seed {seed}");
                }
            }
        }
    }
}

/// Parameters of odd sizes; the flat space is 3·211 + 5 + 40·31 = 1878 coordinates.
fn layout() -> FlatLayout {
    let named: Vec<(String, Var)> = [("a", vec![3, 211]), ("b", vec![5]), ("c", vec![40, 31])]
        .into_iter()
        .map(|(n, s)| (n.into(), Var::zeros(s, DType::F32, &Device::Cpu).unwrap()))
        .collect();
    FlatLayout::new(&named).unwrap()
}

fn gradients(layout: &FlatLayout, rank: usize, step: u64) -> (Vec<Option<Tensor>>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(1000 * step + rank as u64);
    let flat: Vec<f32> = (0..layout.total())
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let grads = layout
        .spans()
        .iter()
        .map(|s| {
            let part = flat[s.offset..s.offset + s.len].to_vec();
            Some(Tensor::from_vec(part, s.shape.clone(), &Device::Cpu).unwrap())
        })
        .collect();
    (grads, flat)
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_vec1::<f32>().unwrap()
}

fn selection_of(p: &Pairs) -> Selection {
    let indices: Vec<i64> = p.indices.iter().map(|&i| i as i64).collect();
    Selection {
        indices: Tensor::from_vec(indices, p.len(), &Device::Cpu).unwrap(),
        values: Tensor::from_vec(p.values.clone(), p.len(), &Device::Cpu).unwrap(),
        time: Default::default(),
        compare_time: None,
        accumulate: Default::default(),
    }
}

/// Each rank: accumulate, select its own top-k, exchange, take out of the residual what the update
/// applied of its pairs. Per step and coordinate, residual after + released = residual before +
/// gradient exactly; over the steps, Σ released + residual = Σ gradients; and for `global` what a
/// rank sent but the cut dropped is still in its residual.
#[test]
fn no_coordinate_is_lost_from_the_residuals() {
    let layout = layout();
    for world in [1, 2, 4] {
        for global in [false, true] {
            for scope in [Scope::Global, Scope::PerTensor] {
                ThreadCollective::run(world, |c| {
                    let rank = c.rank();
                    let mut ef = ErrorFeedback::new(layout.clone(), None, &Device::Cpu).unwrap();
                    let choice = SelectorChoice {
                        kind: profk::Selector::Sort,
                        compare_with: None,
                    };
                    let density = 0.02;
                    let mut released_total = vec![0f64; layout.total()];
                    let mut grad_total = vec![0f64; layout.total()];
                    for step in 0..4 {
                        let before = host(ef.residual());
                        let (grads, flat) = gradients(&layout, rank, step);
                        let sel = ef
                            .accumulate_select(&grads, density, scope, &choice, step)
                            .unwrap();
                        let acc = host(ef.residual());
                        for i in 0..acc.len() {
                            assert_eq!(acc[i], before[i] + flat[i]);
                        }
                        let mine = Pairs {
                            indices: host_i64(&sel.indices).iter().map(|&i| i as u32).collect(),
                            values: host(&sel.values),
                        };
                        let segments = segments(&layout, density, scope);
                        let update = if global {
                            exchange::global_topk(&c, &mine, &segments).unwrap().0
                        } else {
                            exchange::sparse_mean(&c, &mine).unwrap().0
                        };
                        if global {
                            let k: usize = segments.iter().map(|s| s.k).sum();
                            assert_eq!(update.len(), k);
                        }
                        let share = exchange::applied_share(&mine, &update);
                        if !global {
                            assert_eq!(share, mine);
                        }
                        ef.release(&selection_of(&share)).unwrap();
                        let after = host(ef.residual());
                        let mut released = vec![0f32; acc.len()];
                        for (&i, &v) in share.indices.iter().zip(&share.values) {
                            released[i as usize] = v;
                        }
                        for i in 0..acc.len() {
                            assert_eq!(
                                after[i] + released[i],
                                acc[i],
                                "rank {rank}, step {step}, {i}"
                            );
                            released_total[i] += released[i] as f64;
                            grad_total[i] += flat[i] as f64;
                        }
                        // Dropped by the cut: still in the residual, unchanged.
                        for (&i, &v) in mine.indices.iter().zip(&mine.values) {
                            if share.indices.binary_search(&i).is_err() {
                                assert_eq!(after[i as usize], v);
                            }
                        }
                    }
                    let after = host(ef.residual());
                    for i in 0..after.len() {
                        let lhs = released_total[i] + after[i] as f64;
                        assert!(
                            (lhs - grad_total[i]).abs() < 1e-5,
                            "{lhs} vs {}",
                            grad_total[i]
                        );
                    }
                });
            }
        }
    }
}

fn host_i64(t: &Tensor) -> Vec<i64> {
    t.to_vec1::<i64>().unwrap()
}

fn segments(layout: &FlatLayout, density: f64, scope: Scope) -> Vec<Segment> {
    let k = |n: usize| gradsparse::select::k_for(density, n);
    match scope {
        Scope::Global => vec![Segment {
            start: 0,
            end: layout.total() as u32,
            k: k(layout.total()),
        }],
        Scope::PerTensor => layout
            .spans()
            .iter()
            .map(|s| Segment {
                start: s.offset as u32,
                end: (s.offset + s.len) as u32,
                k: k(s.len),
            })
            .collect(),
    }
}
