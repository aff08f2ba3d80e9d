//! The failure budget checked by experiment: many first attempts of Prof-K (the sampling and count
//! stage only, no redraw) on random and adversarial inputs, and how often R < k and R > M were seen
//! against the exact probabilities of the plan (Propositions 2 and 3 of the paper), as its Table 8.
//!
//! The ranking order breaks every tie by index, so the n keys of a row are distinct whatever the
//! values: the predicted probabilities hold for every input, ties, ±inf and duplicates included,
//! and an observed count outside its binomial 3σ band means the sample or the count is wrong.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use serde::Serialize;

use crate::params::{self, Params};
use crate::{Error, Plan, Result};

/// The inputs the failure rates are measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// Standard normals.
    Normal,
    /// Every value equal: the whole row ties with the threshold.
    Constant,
    /// Every fourth element 1.0, the rest normals below it: the threshold falls among n/4 ties.
    TiesAtThreshold,
    /// Ascending values.
    Sorted,
    /// Descending values.
    Reversed,
    /// Four distinct values.
    FewDistinct,
    /// +inf and −inf over an eighth of the row each, normals between.
    Infinities,
    /// Heavy duplicates: 99 % zeros, the rest ones.
    Duplicates,
}

impl Input {
    pub const ALL: [Input; 8] = [
        Input::Normal,
        Input::Constant,
        Input::TiesAtThreshold,
        Input::Sorted,
        Input::Reversed,
        Input::FewDistinct,
        Input::Infinities,
        Input::Duplicates,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Input::Normal => "normal",
            Input::Constant => "constant",
            Input::TiesAtThreshold => "ties_at_threshold",
            Input::Sorted => "sorted",
            Input::Reversed => "reversed",
            Input::FewDistinct => "few_distinct",
            Input::Infinities => "infinities",
            Input::Duplicates => "duplicates",
        }
    }

    /// `rows` rows of `n` values of this kind, deterministic in `seed`.
    pub fn rows(self, rows: usize, n: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut normal = || rng.sample::<f32, _>(StandardNormal);
        let mut out = Vec::with_capacity(rows * n);
        for _ in 0..rows {
            for i in 0..n {
                let v = match self {
                    Input::Normal => normal(),
                    Input::Constant => 0.5,
                    Input::TiesAtThreshold if i % 4 == 0 => 1.0,
                    Input::TiesAtThreshold => normal().min(0.99),
                    Input::Sorted => i as f32,
                    Input::Reversed => (n - i) as f32,
                    Input::FewDistinct => (i % 4) as f32,
                    Input::Infinities if i % 8 == 0 => f32::INFINITY,
                    Input::Infinities if i % 8 == 1 => f32::NEG_INFINITY,
                    Input::Infinities => normal(),
                    Input::Duplicates => f32::from(u8::from(i % 100 == 0)),
                };
                out.push(v);
            }
        }
        out
    }
}

/// First attempts of one plan on one input and what they showed.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    pub device: String,
    pub input: Input,
    /// The plan, its budget per row and its exact failure probabilities.
    pub params: Params,
    pub attempts: u64,
    pub recall_failures: u64,
    pub overflows: u64,
}

/// An observed count of a binomial(attempts, p) event against its mean ± 3σ.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Band {
    pub predicted: f64,
    pub low: f64,
    pub high: f64,
    pub observed: u64,
}

impl Band {
    pub fn new(attempts: u64, p: f64, observed: u64) -> Self {
        let mean = attempts as f64 * p;
        let sd = (mean * (1.0 - p)).max(0.0).sqrt();
        Self {
            predicted: mean,
            low: (mean - 3.0 * sd).max(0.0),
            high: mean + 3.0 * sd,
            observed,
        }
    }

    pub fn holds(&self) -> bool {
        (self.low..=self.high).contains(&(self.observed as f64))
    }
}

impl Trial {
    /// R < k against Pr(R < k).
    pub fn recall(&self) -> Band {
        Band::new(
            self.attempts,
            self.params.p_recall_fail,
            self.recall_failures,
        )
    }

    /// R > M against Pr(R > M).
    pub fn overflow(&self) -> Band {
        Band::new(self.attempts, self.params.p_overflow, self.overflows)
    }

    pub fn holds(&self) -> bool {
        self.recall().holds() && self.overflow().holds()
    }
}

/// One measurement: rows of n, k, the budget per row, and how many first attempts.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub rows: usize,
    pub n: usize,
    pub k: usize,
    pub eps: f64,
    /// Sample size S instead of the device's rule (t and M stay exact for it).
    pub sample: Option<u64>,
    pub attempts: u64,
    pub seed: u64,
}

/// The parameters `device`'s path uses for `config` (the same function that plans its calls), or
/// with `config.sample`, the exact parameters for that sample size; `None` when that path selects
/// without sampling.
pub fn plan_params(device: &Device, config: &Config) -> Result<Option<Params>> {
    let (n, k) = (config.n as u64, config.k as u64);
    match config.sample {
        Some(s) => {
            let p = params::exact(n, k, config.eps, Some(s))?;
            Ok((!p.is_full_selection() && p.k > 0).then_some(p))
        }
        None if device.is_cpu() => crate::cpu_params_for(config.n, config.k, config.eps),
        None => crate::gpu_params_for(config.n, config.k, config.eps, config.rows),
    }
}

/// At least `config.attempts` first attempts on `input` (whole calls of `config.rows` rows, a new
/// seed each) with the plan of [`plan_params`]; `None` when that path does not sample.
pub fn measure(device: &Device, input: Input, config: &Config) -> Result<Option<Trial>> {
    let Some(params) = plan_params(device, config)? else {
        return Ok(None);
    };
    let plan = Plan::from(params);
    let data = input.rows(config.rows, config.n, config.seed);
    let x = Tensor::from_vec(data, (config.rows, config.n), device)?;
    let mut trial = Trial {
        device: device_name(device),
        input,
        params,
        attempts: 0,
        recall_failures: 0,
        overflows: 0,
    };
    let mut call = 0u64;
    while trial.attempts < config.attempts {
        let seed = config.seed ^ (call + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
        let (recall, overflow) = first_attempts(&x, config.k, plan, seed)?;
        trial.attempts += config.rows as u64;
        trial.recall_failures += recall;
        trial.overflows += overflow;
        call += 1;
    }
    Ok(Some(trial))
}

/// (R < k, R > M) counted over the rows of one call.
fn first_attempts(x: &Tensor, k: usize, plan: Plan, seed: u64) -> Result<(u64, u64)> {
    match x.device() {
        Device::Cpu => {
            let retained = crate::select::cpu::first_attempts(x, plan, seed)?;
            let recall = retained.iter().filter(|&&r| r < k as u64).count() as u64;
            let overflow = retained.iter().filter(|&&r| r > plan.capacity).count() as u64;
            Ok((recall, overflow))
        }
        #[cfg(all(feature = "cuda", feature = "bench"))]
        Device::Cuda(_) => {
            let stats = crate::cuda::first_attempts(x, k, plan, seed)?;
            Ok((stats.recall_failures, stats.overflows))
        }
        other => Err(Error::Param(format!(
            "first attempts run on the CPU, or on CUDA in a build with --features cuda,bench; not on {other:?}"
        ))),
    }
}

fn device_name(device: &Device) -> String {
    if device.is_cpu() {
        "cpu".into()
    } else {
        "cuda".into()
    }
}
