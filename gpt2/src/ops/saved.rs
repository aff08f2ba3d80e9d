//! What a custom op's forward pass leaves for its backward pass.
use candle_core::Result;
use std::sync::Mutex;

/// Written by the forward, read by the backward: candle's custom ops see themselves through `&self`.
pub(super) struct Saved<T>(Mutex<Option<T>>);

impl<T: Clone> Saved<T> {
    pub(super) fn empty() -> Self {
        Self(Mutex::new(None))
    }

    pub(super) fn keep(&self, value: T) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
    }

    /// The value of the last forward; `op` names the op in the error when there was none.
    pub(super) fn get(&self, op: &str) -> Result<T> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| candle_core::Error::Msg(format!("{op}: backward before forward")))
    }
}
