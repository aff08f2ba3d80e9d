use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which algorithm performs the selection. All are exact and share the tie rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Selector {
    /// Sampled threshold, one filtering pass, exact top-k of the buffer.
    #[default]
    Profk,
    /// Full sort, then the first k.
    Sort,
    /// Partial selection (quickselect on CPU) plus a sort of the k.
    Select,
    /// Radix select (the approach of torch.topk): histograms of the key digits, memory O(k).
    Radix,
}

impl Selector {
    /// Every selector, in the order they are documented.
    pub const ALL: [Selector; 4] = [
        Selector::Profk,
        Selector::Sort,
        Selector::Select,
        Selector::Radix,
    ];

    /// The name configs, run directories and reports use (`profk`, `sort`, `select`, `radix`).
    pub fn name(self) -> &'static str {
        match self {
            Selector::Profk => "profk",
            Selector::Sort => "sort",
            Selector::Select => "select",
            Selector::Radix => "radix",
        }
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Selector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Selector::ALL
            .into_iter()
            .find(|sel| sel.name() == s)
            .ok_or_else(|| {
                format!("{s:?} is not a selector: expected profk, sort, select or radix")
            })
    }
}

/// How the elements of the input are grouped into selections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One selection per row of the last dimension; a 1-D input is one row.
    #[default]
    Rowwise,
    /// One selection over every element of the tensor, returning flat indices.
    Flat,
}

/// Order of the k outputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Values descending, ties by lowest index.
    #[default]
    Desc,
    /// Ascending index.
    Index,
}

/// What a NaN in the input means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NanPolicy {
    /// A NaN is an error naming the count and the first index.
    #[default]
    Error,
    /// NaN ranks above +inf (torch's ordering).
    Largest,
}

/// Options of one top-k call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopKOptions {
    pub selector: Selector,
    pub mode: Mode,
    pub order: Order,
    pub nan: NanPolicy,
    /// Rank by |x| instead of x; the returned values keep their sign.
    pub by_magnitude: bool,
    /// Failure budget of one attempt (split over the rows in row-wise mode).
    pub eps: f64,
    /// Skip the overflow check: an attempt with R > M returns the top k of the candidates it stored
    /// instead of redrawing (exact with probability ≥ 1 − eps). R < k is still redrawn, so k
    /// distinct in-range indices always come back.
    pub approximate: bool,
    /// Seed of the sampler; the output never depends on it.
    pub seed: u64,
}

impl TopKOptions {
    /// The failure budget of one row: row-wise mode splits ε over the rows.
    pub fn row_budget(&self, rows: usize) -> f64 {
        match self.mode {
            Mode::Flat => self.eps,
            Mode::Rowwise => self.eps / rows.max(1) as f64,
        }
    }
}

impl Default for TopKOptions {
    fn default() -> Self {
        Self {
            selector: Selector::Profk,
            mode: Mode::Rowwise,
            order: Order::Desc,
            nan: NanPolicy::Error,
            by_magnitude: false,
            eps: 1e-3,
            approximate: false,
            seed: 0x5eed,
        }
    }
}
