//! Error-feedback top-k gradient sparsification for fine-tuning GPT-2.
//!
//! After backward, each gradient is added into a flat residual (`acc = r + g`, optionally with DGC
//! momentum correction), the top ρ of `|acc|` is selected globally or per tensor by a Prof-K, sort or
//! radix selector, only those coordinates go through AdamW, and the rest stays in the residual. The
//! dense mode (`[sparsify] mode = "dense"`) applies plain AdamW to the whole gradient: the baseline.

pub mod adamw;
pub mod checkpoint;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod data;
pub mod distributed;
pub mod error;
pub mod feedback;
pub mod flatops;
pub mod layout;
pub mod mass;
pub mod memory;
pub mod run;
pub mod select;
pub mod trainer;

pub use adamw::{AdamWParams, SparseAdamW};
pub use config::FinetuneConfig;
pub use error::{Error, Result};
pub use feedback::ErrorFeedback;
pub use layout::{FlatLayout, ParamSpan};
pub use select::{Scope, Selection, SelectorChoice};
pub use trainer::{FeedbackStats, StepReport, Trainer};
