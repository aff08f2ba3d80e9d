//! Packs a trained tiny GPT-2 (a directory in Hugging Face layout, e.g. what
//! `finetune configs/tiny-model-recipe.toml --install-default` installs) into the shipped asset
//! `activations/assets/tiny-gpt2.safetensors.zst`: bf16, the embedding rows of tokens that never occur in
//! the shipped corpus replaced by their mean (one row, repeated, which zstd stores once), zstd level 19.
//!
//!     cargo run --release -p activations --example pack_tiny -- MODEL_DIR activations/assets/tiny-gpt2.safetensors.zst
use activations::{corpus::default_corpus, Gpt2Tokenizer};
use candle_core::{DType, Device, Tensor};
use gpt2::Gpt2;
use std::collections::HashMap;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model_dir, out] = args.as_slice() else {
        anyhow::bail!("usage: pack_tiny MODEL_DIR OUT.safetensors.zst");
    };
    let model = Gpt2::load(model_dir, DType::F32, &Device::Cpu)?;
    let tokens = default_corpus().tokenize(&Gpt2Tokenizer::new()?)?;
    let vocab = model.config().vocab_size;
    let mut used = vec![false; vocab];
    for t in tokens {
        used[t as usize] = true;
    }
    let n_used = used.iter().filter(|u| **u).count();
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for (name, t) in model.named_tensors() {
        let t = if name == "wte.weight" {
            let mut rows: Vec<Vec<f32>> = t.to_vec2()?;
            let d = rows[0].len();
            let mut mean = vec![0f64; d];
            let unused = vocab - n_used;
            for (row, _) in rows.iter().zip(&used).filter(|(_, u)| !**u) {
                for (m, v) in mean.iter_mut().zip(row) {
                    *m += *v as f64 / unused as f64;
                }
            }
            let mean: Vec<f32> = mean.iter().map(|v| *v as f32).collect();
            for (row, _) in rows.iter_mut().zip(&used).filter(|(_, u)| !**u) {
                row.clone_from(&mean);
            }
            Tensor::from_vec(rows.concat(), (vocab, d), &Device::Cpu)?
        } else {
            t
        };
        tensors.insert(name, t.to_dtype(DType::BF16)?);
    }
    let tmp = std::env::temp_dir().join("tiny-gpt2-pack.safetensors");
    candle_core::safetensors::save(&tensors, &tmp)?;
    let raw = std::fs::read(&tmp)?;
    std::fs::remove_file(&tmp)?;
    let packed = zstd::encode_all(raw.as_slice(), 19)?;
    std::fs::write(out, &packed)?;
    println!(
        "{out}: {} bytes ({} bytes of bf16 safetensors; {n_used} of {vocab} embedding rows kept)",
        packed.len(),
        raw.len()
    );
    Ok(())
}
