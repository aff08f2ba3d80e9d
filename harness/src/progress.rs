//! Plain progress lines for logs: when stderr is not a terminal (SLURM, nohup, `| tee`) the bar is
//! hidden, so the loop prints `step 120/600 (20%)  3.1k tok/s  ETA 2m05s  loss 0.1234` every few
//! seconds instead, each line written as it happens.

use crate::metrics::{names, Metrics};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Prints a progress line at most every `every`, plus one when the run ends.
#[derive(Debug)]
pub struct ProgressLines {
    every: Duration,
    total: u64,
    first_step: u64,
    began: Instant,
    last: Option<Instant>,
    shown: Vec<String>,
}

impl ProgressLines {
    /// Lines only when `wanted` (the progress display is on) and stderr is not a terminal (where the
    /// bar shows instead).
    pub fn for_log(
        wanted: bool,
        every: Duration,
        total: u64,
        first_step: u64,
        shown: &[String],
    ) -> Option<ProgressLines> {
        (wanted && !std::io::stderr().is_terminal()).then(|| ProgressLines {
            every,
            total,
            first_step,
            began: Instant::now(),
            last: None,
            shown: shown.to_vec(),
        })
    }

    /// Called with each train record; prints when the interval has passed or the run is done.
    pub fn record(&mut self, step: u64, metrics: &Metrics) {
        let now = Instant::now();
        let due = self.last.is_none_or(|t| now - t >= self.every);
        if due || step >= self.total {
            self.last = Some(now);
            eprintln!("{}", self.line(step, metrics, now));
        }
    }

    fn line(&self, step: u64, metrics: &Metrics, now: Instant) -> String {
        let pct = 100.0 * step as f64 / self.total.max(1) as f64;
        let mut parts = vec![format!("step {step}/{} ({pct:.0}%)", self.total)];
        if let Some(tps) = metrics.get(names::TOKENS_PER_S) {
            parts.push(format!("{} tok/s", human(*tps)));
        }
        let done = step.saturating_sub(self.first_step);
        if done > 0 && step < self.total {
            let per_step = (now - self.began).as_secs_f64() / done as f64;
            parts.push(format!(
                "ETA {}",
                clock(per_step * (self.total - step) as f64)
            ));
        }
        for name in &self.shown {
            if let Some(v) = metrics.get(name) {
                parts.push(format!("{name} {v:.4}"));
            }
        }
        parts.join("  ")
    }
}

/// 1234567 → "1.23M".
pub fn human(x: f64) -> String {
    match x.abs() {
        a if a >= 1e9 => format!("{:.2}G", x / 1e9),
        a if a >= 1e6 => format!("{:.2}M", x / 1e6),
        a if a >= 1e3 => format!("{:.1}k", x / 1e3),
        _ => format!("{x:.0}"),
    }
}

/// Seconds as `1h02m`, `2m05s` or `7s`.
fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_step_speed_eta_and_the_shown_metrics() {
        let mut lines = ProgressLines {
            every: Duration::from_secs(10),
            total: 600,
            first_step: 0,
            began: Instant::now() - Duration::from_secs(20),
            last: None,
            shown: vec!["loss".into()],
        };
        let m = Metrics::from([("loss".into(), 0.5), (names::TOKENS_PER_S.into(), 3100.0)]);
        let line = lines.line(120, &m, Instant::now());
        assert!(
            line.starts_with("step 120/600 (20%)  3.1k tok/s  ETA 1m20s  loss 0.5000"),
            "{line}"
        );
        lines.record(120, &m);
        assert!(lines.last.is_some());
        assert_eq!(clock(3725.0), "1h02m");
    }
}
