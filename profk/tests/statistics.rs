//! The observed failure rates of the sampled threshold agree with the exact probabilities.
#[macro_use]
mod common;

test_device!(
    failure_rates_match_theory,
    common::failure_rates_match_theory
);
