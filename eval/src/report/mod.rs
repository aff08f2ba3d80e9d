//! The run-comparison report: one self-contained HTML page with inline SVG plots and a summary table.
