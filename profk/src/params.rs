//! Placeholder for the exact and fast Prof-K parameters.
