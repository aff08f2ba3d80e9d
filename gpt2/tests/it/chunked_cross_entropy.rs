//! The chunked next-token loss of the output head against the loss of the whole logits: the same
//! value and gradients (to f32 rounding) for any chunk length, alone and inside the model.
use crate::common;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use common::{max_abs, max_abs_diff, randn};
use gpt2::ops::{next_token_cross_entropy, next_token_cross_entropy_chunked};
use gpt2::{Gpt2, Gpt2Config};

fn tokens(b: usize, t: usize, v: usize, seed: u64) -> Tensor {
    let ids: Vec<u32> = (0..b * t)
        .map(|i| ((i as u64 * 2654435761 + seed) % v as u64) as u32)
        .collect();
    Tensor::from_vec(ids, (b, t), &Device::Cpu).unwrap()
}

fn f32_randn(shape: &[usize], std: f64, seed: u64) -> Tensor {
    randn(shape, std, seed).to_dtype(DType::F32).unwrap()
}

/// |got − want| within `tol` of the largest |want|.
fn assert_close(got: &Tensor, want: &Tensor, tol: f64, what: &str) {
    let err = max_abs_diff(got, want);
    let largest = max_abs(want);
    assert!(
        err <= tol * largest,
        "{what}: error {err} (largest {largest})"
    );
}

#[test]
fn matches_the_loss_of_the_whole_logits() {
    // (batch, positions, width, vocabulary): chunks that divide the rows, that do not, of one row,
    // and longer than all rows.
    let (b, t, d, v) = (3, 7, 16, 1000);
    let hidden = f32_randn(&[b, t, d], 1.0, 1);
    let unembed = f32_randn(&[v, d], 0.5, 2);
    let tok = tokens(b, t, v, 5);

    let [h, w] = [&hidden, &unembed].map(|x| Var::from_tensor(x).unwrap());
    let logits = h
        .as_tensor()
        .reshape((b * t, d))
        .unwrap()
        .matmul(&w.as_tensor().t().unwrap())
        .unwrap()
        .reshape((b, t, v))
        .unwrap();
    let want = next_token_cross_entropy(&logits, &tok).unwrap();
    let want_grads = (&want * 3.0).unwrap().backward().unwrap();
    let want = want.to_scalar::<f32>().unwrap();

    for chunk in [1, 4, 7, 21, 1000] {
        let [h2, w2] = [&hidden, &unembed].map(|x| Var::from_tensor(x).unwrap());
        let loss =
            next_token_cross_entropy_chunked(h2.as_tensor(), w2.as_tensor(), &tok, chunk).unwrap();
        let got = loss.to_scalar::<f32>().unwrap();
        assert!(
            (got - want).abs() <= 1e-6 * want.abs(),
            "chunk {chunk}: loss {got} vs {want}"
        );
        let grads = (loss * 3.0).unwrap().backward().unwrap();
        for (ours, theirs, what) in [(&h2, &h, "hidden"), (&w2, &w, "unembedding")] {
            assert_close(
                grads.get(ours.as_tensor()).unwrap(),
                want_grads.get(theirs.as_tensor()).unwrap(),
                1e-5,
                &format!("chunk {chunk}: gradient of the {what}"),
            );
        }
        // Without tracked inputs the loss alone, the same value.
        let plain = next_token_cross_entropy_chunked(&hidden, &unembed, &tok, chunk)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_eq!(plain, got, "chunk {chunk}: loss without gradients");
    }
}

#[test]
fn bad_targets_and_shapes_are_reported() {
    let hidden = f32_randn(&[1, 3, 4], 1.0, 3);
    let unembed = f32_randn(&[10, 4], 1.0, 4);
    let out_of_vocab = Tensor::new(&[[1u32, 10, 2]], &Device::Cpu).unwrap();
    let loss = next_token_cross_entropy_chunked(&hidden, &unembed, &out_of_vocab, 2).unwrap();
    assert!(loss.to_scalar::<f32>().unwrap().is_nan());
    let short = Tensor::new(&[[1u32, 2]], &Device::Cpu).unwrap();
    let err = next_token_cross_entropy_chunked(&hidden, &unembed, &short, 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("[B, T, d]"), "{err}");
    let tok = Tensor::new(&[[1u32, 2, 3]], &Device::Cpu).unwrap();
    let err = next_token_cross_entropy_chunked(&hidden, &unembed, &tok, 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("chunk"), "{err}");
}

/// The trainable tiny GPT-2 (GPT-2's 50 257-word vocabulary): `forward_loss` against the loss of
/// `forward_logits`, value and the gradient of every weight.
#[test]
fn model_loss_matches_the_loss_of_its_logits() {
    let random = Gpt2::random(Gpt2Config::tiny(), 7, DType::F32, &Device::Cpu).unwrap();
    let varmap = VarMap::new();
    let model = random.to_varmap(&varmap).unwrap();
    let vars: Vec<(String, Var)> = {
        let data = varmap.data().lock().unwrap();
        data.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
    };
    let tok = tokens(2, 9, 50257, 11);

    let want = Gpt2::next_token_loss(&model.forward_logits(&tok).unwrap(), &tok).unwrap();
    let want_grads = want.backward().unwrap();
    let loss = model.forward_loss(&tok).unwrap();
    let grads = loss.backward().unwrap();
    let (got, want) = (
        loss.to_scalar::<f32>().unwrap(),
        want.to_scalar::<f32>().unwrap(),
    );
    assert!((got - want).abs() <= 1e-6 * want, "loss {got} vs {want}");
    for (name, var) in &vars {
        assert_close(
            grads.get(var.as_tensor()).unwrap(),
            want_grads.get(var.as_tensor()).unwrap(),
            1e-4,
            name,
        );
    }
    let no_grad = model.forward_loss_no_grad(&tok).unwrap();
    assert!(!no_grad.track_op());
    assert_eq!(no_grad.to_scalar::<f32>().unwrap(), got);
}
