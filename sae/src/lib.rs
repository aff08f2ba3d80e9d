//! sae
