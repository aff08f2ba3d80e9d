//! activations
