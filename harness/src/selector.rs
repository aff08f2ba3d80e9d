//! `[selector]`: the one selector section of `train-sae` and `finetune`.
use profk::Selector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[selector]`: the exact top-k selector of every training step and the in-run check against a
/// second one.
///
/// ```toml
/// [selector]
/// kind = "profk"           # "profk" | "sort" | "select" | "radix"
/// compare = true           # also run a second selector and require the same selection
/// compare_every = 100      # ... every 100 steps (its time is logged as compare_select_ms)
/// # compare_with unset: "sort", or "profk" when kind = "sort"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SelectorConfig {
    /// The selector every training step uses: `profk` (sampled threshold, one filtering pass), `sort`
    /// (full sort), `select` (partial selection) or `radix` (radix select, as torch.topk). All are
    /// exact and give the same selection.
    pub kind: Selector,
    /// Also run a second selector (`compare_with`) on the same input every `compare_every` steps and
    /// stop the run if its selection differs; its time is logged beside the primary's.
    pub compare: bool,
    /// The second selector of `compare`. Unset: `sort`, or `profk` when `kind = "sort"`, so that the
    /// sort baseline needs only `--set selector.kind=sort`. Set to `kind` itself, there is nothing to
    /// compare: the comparison is off and the run says so.
    pub compare_with: Option<Selector>,
    /// Steps between comparisons (1: every step), counted from step 0.
    pub compare_every: u64,
}

/// Steps between in-run comparisons unless `selector.compare_every` says otherwise.
pub const DEFAULT_COMPARE_EVERY: u64 = 100;

impl Default for SelectorConfig {
    fn default() -> Self {
        SelectorConfig {
            kind: Selector::Profk,
            compare: false,
            compare_with: None,
            compare_every: DEFAULT_COMPARE_EVERY,
        }
    }
}

impl SelectorConfig {
    /// The second selector when the comparison runs: `compare_with`, or the other of profk and sort;
    /// `None` when `compare` is off or `compare_with` is `kind` itself.
    pub fn compare_with(&self) -> Option<Selector> {
        if !self.compare {
            return None;
        }
        let other = self.compare_with.unwrap_or(match self.kind {
            Selector::Sort => Selector::Profk,
            _ => Selector::Sort,
        });
        (other != self.kind).then_some(other)
    }

    /// Whether step `step` (0-based) runs the comparison.
    pub fn compares_at(&self, step: u64) -> bool {
        self.compare_with().is_some() && self.comparison_due(step)
    }

    /// Whether step `step` (0-based) is one of every `compare_every` steps, whichever second
    /// selector runs there.
    pub fn comparison_due(&self, step: u64) -> bool {
        step.is_multiple_of(self.compare_every.max(1))
    }

    /// What a run prints at its start when the config asked for a comparison that cannot run.
    pub fn note(&self) -> Option<String> {
        (self.compare && self.compare_with().is_none()).then(|| {
            format!(
                "note: selector.compare_with = {:?} is selector.kind itself: nothing to compare, \
                 the comparison is off (unset compare_with to compare with {})",
                self.kind.name(),
                match self.kind {
                    Selector::Sort => "profk",
                    _ => "sort",
                }
            )
        })
    }

    /// Checks values serde cannot; the error is (dotted key, message).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.compare && self.compare_every == 0 {
            return Err(("selector.compare_every", "must be at least 1".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: Selector, compare: bool, with: Option<Selector>) -> SelectorConfig {
        SelectorConfig {
            kind,
            compare,
            compare_with: with,
            ..SelectorConfig::default()
        }
    }

    #[test]
    fn the_unset_second_selector_is_the_other_of_profk_and_sort() {
        use Selector::*;
        assert_eq!(cfg(Profk, true, None).compare_with(), Some(Sort));
        assert_eq!(cfg(Sort, true, None).compare_with(), Some(Profk));
        assert_eq!(cfg(Radix, true, None).compare_with(), Some(Sort));
        assert_eq!(cfg(Profk, true, Some(Radix)).compare_with(), Some(Radix));
        assert_eq!(cfg(Profk, false, None).compare_with(), None);
        assert_eq!(cfg(Profk, false, None).note(), None);
    }

    #[test]
    fn comparing_a_selector_with_itself_is_off_with_a_note() {
        let same = cfg(Selector::Sort, true, Some(Selector::Sort));
        assert_eq!(same.compare_with(), None);
        assert!(!same.compares_at(0));
        let note = same.note().unwrap();
        assert!(note.contains("comparison is off"), "{note}");
    }

    #[test]
    fn comparisons_run_every_compare_every_steps() {
        let c = SelectorConfig {
            compare_every: 3,
            ..cfg(Selector::Profk, true, None)
        };
        let at: Vec<u64> = (0..7).filter(|&s| c.compares_at(s)).collect();
        assert_eq!(at, [0, 3, 6]);
        let zero = SelectorConfig {
            compare_every: 0,
            ..c
        };
        assert_eq!(zero.validate().unwrap_err().0, "selector.compare_every");
    }
}
