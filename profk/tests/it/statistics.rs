//! The observed failure rates of the sampled threshold agree with the exact probabilities.
use crate::common;

use runtime::test_device;

test_device!(
    failure_rates_match_theory,
    common::failure_rates_match_theory
);

// The CUDA path counts first attempts with `Tuning::first_attempt_only` (the `bench` feature).
mod first_attempts {
    #[test]
    fn cpu() -> anyhow::Result<()> {
        super::first_attempts_match_plan(&candle_core::Device::Cpu)
    }

    #[cfg(all(feature = "cuda", feature = "bench"))]
    #[test]
    fn cuda() -> anyhow::Result<()> {
        super::first_attempts_match_plan(&candle_core::Device::new_cuda(0)?)
    }
}

/// `profk epsilon`'s measurement on a plan whose failures are frequent (a sample of 512 from rows of
/// 2^14, ε = 0.3): on every input, ties and infinities included, the counts of R < k and R > M over
/// 2000 first attempts lie in the 3σ bands of the exact probabilities, and a threshold rank two off
/// the plan's would be caught.
fn first_attempts_match_plan(dev: &candle_core::Device) -> anyhow::Result<()> {
    use profk::epsilon::{measure, Band, Config, Input};
    let config = Config {
        rows: 100,
        n: 1 << 14,
        k: 512,
        eps: 0.3,
        sample: Some(512),
        attempts: 2000,
        seed: 0x5eed,
    };
    for input in Input::ALL {
        let trial = measure(dev, input, &config)?
            .ok_or_else(|| anyhow::anyhow!("the plan does not sample"))?;
        let p = trial.params;
        anyhow::ensure!(
            p.p_recall_fail > 0.05 && p.p_overflow > 0.05,
            "failures too rare to test: {p:?}"
        );
        anyhow::ensure!(trial.attempts >= config.attempts);
        anyhow::ensure!(
            trial.holds(),
            "{}: R < k {:?}, R > M {:?}",
            input.name(),
            trial.recall(),
            trial.overflow()
        );
        let (off_recall, _) =
            profk::params::failure_probabilities(p.n, p.k, p.sample, p.t + 2, p.capacity);
        let off = Band::new(trial.attempts, off_recall, trial.recall_failures);
        anyhow::ensure!(
            !off.holds(),
            "{}: t + 2 would fit as well: {off:?}",
            input.name()
        );
    }
    Ok(())
}
