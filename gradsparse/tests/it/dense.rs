//! The dense baseline (`[sparsify] mode = "dense"`) and the error-feedback metrics of a step.
use candle_core::{DType, Tensor};
use gradsparse::data::Batches;
use gradsparse::trainer::{build_model, device_of};
use gradsparse::{FinetuneConfig, Trainer};

const SMALL: &str = r#"
name = "test"
seed = 3
[model]
name = "tiny"
[data]
context = 32
[train]
batch_size = 4
steps = 20
lr = 3e-3
weight_decay = 0.01
[sparsify]
density = 0.02
[log]
progress = false
"#;

fn trainer(toml: &str) -> Trainer {
    let cfg = FinetuneConfig::from_toml(toml).unwrap();
    let device = device_of(cfg.device).unwrap();
    let model = build_model(&cfg, &device).unwrap();
    let (batches, _) = Batches::from_config(&cfg, model.config().vocab_size).unwrap();
    Trainer::new(cfg, &model, batches).unwrap()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn dense() -> String {
    SMALL.replace("density = 0.02", "mode = \"dense\"\ndensity = 0.02")
}

#[test]
fn dense_mode_trains() {
    let mut t = trainer(&dense());
    assert_eq!(t.config().selector_label(), "dense");
    let mut losses = Vec::new();
    for _ in 0..12 {
        let r = t.train_step().unwrap();
        assert_eq!(r.k, t.layout().total());
        assert_eq!(r.density, 1.0);
        let f = r.feedback.unwrap();
        assert_eq!((f.residual_norm, f.kept_share), (0.0, 1.0));
        losses.push(r.loss);
    }
    let head: f32 = losses[..3].iter().sum::<f32>() / 3.0;
    let tail: f32 = losses[9..].iter().sum::<f32>() / 3.0;
    assert!(tail < head - 1.0, "loss {head} → {tail}: {losses:?}");
    // Nothing is carried over.
    assert!(flat(t.feedback().residual()).iter().all(|&x| x == 0.0));
}

/// Dense AdamW is error feedback selecting every coordinate: the same weights after a few steps.
#[test]
fn dense_mode_is_topk_at_full_density() {
    let mut a = trainer(&dense());
    let mut b = trainer(&SMALL.replace("density = 0.02", "density = 1.0"));
    for _ in 0..3 {
        let (ra, rb) = (a.train_step().unwrap(), b.train_step().unwrap());
        assert_eq!(ra.k, rb.k);
        assert!(
            (ra.loss - rb.loss).abs() <= 1e-5 * rb.loss,
            "{ra:?} vs {rb:?}"
        );
    }
    for (va, vb) in a.vars().iter().zip(b.vars()) {
        let (x, y) = (flat(va.as_tensor()), flat(vb.as_tensor()));
        let worst = x
            .iter()
            .zip(&y)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-6, "weights differ by {worst}");
    }
}

/// `ef_kept_share` and `ef_residual_norm` of a step against a plain top-k of the accumulated
/// gradient (the residual the previous step left plus this step's gradient).
#[test]
fn feedback_stats_match_a_plain_top_k() {
    let cfg = FinetuneConfig::from_toml(SMALL).unwrap();
    let mut t = trainer(SMALL);
    t.train_step().unwrap();
    let carried = flat(t.feedback().residual());
    let (batches, _) = Batches::from_config(&cfg, t.model().config().vocab_size).unwrap();
    let tokens = batches.train_batch(1, t.device()).unwrap();
    let grads = t.model().forward_loss(&tokens).unwrap().backward().unwrap();
    let gradient: Vec<f32> = t
        .vars()
        .iter()
        .flat_map(|v| flat(grads.get(v).unwrap()))
        .collect();
    let acc: Vec<f64> = carried
        .iter()
        .zip(&gradient)
        .map(|(&r, &g)| (r + g) as f64)
        .collect();

    let report = t.train_step_with_stats().unwrap();
    let stats = report.feedback.expect("measured");
    let mut squares: Vec<f64> = acc.iter().map(|x| x * x).collect();
    squares.sort_by(|x, y| y.total_cmp(x));
    let total: f64 = squares.iter().sum();
    let kept: f64 = squares[..report.k].iter().sum();
    let left: f64 = squares[report.k..].iter().sum();
    let want_share = kept / total;
    assert!(
        (stats.kept_share - want_share).abs() <= 1e-6 * want_share,
        "kept share {} vs {want_share}",
        stats.kept_share
    );
    assert!(
        (stats.residual_norm - left.sqrt()).abs() <= 1e-6 * left.sqrt(),
        "residual norm {} vs {}",
        stats.residual_norm,
        left.sqrt()
    );
    let residual: f64 = flat(t.feedback().residual())
        .iter()
        .map(|&x| (x as f64).powi(2))
        .sum();
    assert!((stats.residual_norm - residual.sqrt()).abs() <= 1e-9 * residual.sqrt());
    // Steps that are not asked to measure do not.
    assert!(t.train_step().unwrap().feedback.is_none());
}
