//! The observed failure rates of the sampled threshold agree with the exact probabilities.
mod common;

use runtime::test_device;

test_device!(
    failure_rates_match_theory,
    common::failure_rates_match_theory
);
